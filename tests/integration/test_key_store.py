"""The `api_keys` table on PostgreSQL and SQLite, through the `ApiKeyStore` port."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from adapters.store.keys import SqlApiKeyStore
from adapters.store.sql import SqlEventStore
from adapters.store.tables import api_keys
from domain.errors import Conflict
from service.access import keys as uc
from service.ports import ApiKey


async def test_keys_round_trip_and_the_secret_is_nowhere_in_the_table(
    store: SqlEventStore,
) -> None:
    keys = SqlApiKeyStore(store)
    new = await uc.create_key(keys, "alice", "laptop", now=123.5)
    assert await keys.get(new.key.id) == new.key
    assert await keys.find(uc.hash_secret(new.secret)) == new.key
    assert await keys.find(uc.hash_secret(new.secret + "x")) is None
    async with store.engine.connect() as conn:
        rows = (await conn.execute(sa.select(api_keys))).all()
    assert all(new.secret not in str(tuple(row)) for row in rows)
    assert new.key in await keys.all()


async def test_revoke_marks_a_key_once(store: SqlEventStore) -> None:
    keys = SqlApiKeyStore(store)
    new = await uc.create_key(keys, "bob", None, now=1.0)
    assert await keys.revoke(new.key.id, 2.0) is True
    assert await keys.revoke(new.key.id, 3.0) is False
    assert await keys.revoke("key_missing", 3.0) is False
    revoked = await keys.get(new.key.id)
    assert revoked is not None and revoked.revoked_at == 2.0
    assert await uc.authenticate(keys, new.secret) is None


async def test_two_keys_cannot_share_a_hash(store: SqlEventStore) -> None:
    keys = SqlApiKeyStore(store)
    one = ApiKey(id="key_dup_a", owner="a", prefix="rsk-x", name=None, created_at=1.0)
    two = ApiKey(id="key_dup_b", owner="b", prefix="rsk-y", name=None, created_at=1.0)
    await keys.add(one, "f" * 64)
    with pytest.raises(Conflict):
        await keys.add(two, "f" * 64)
    assert await keys.find("f" * 64) == one
