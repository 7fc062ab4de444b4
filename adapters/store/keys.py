"""The `api_keys` table behind the `ApiKeyStore` port, on either database of the store."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
import sqlalchemy.exc as sa_exc

from adapters.store.sql import SqlEventStore
from adapters.store.tables import api_keys as t_keys
from adapters.store.transient import guarded
from domain.errors import Conflict
from service.ports import ApiKey, ApiKeyStore

_COLUMNS = (
    t_keys.c.id,
    t_keys.c.owner,
    t_keys.c.prefix,
    t_keys.c.name,
    t_keys.c.created_at,
    t_keys.c.revoked_at,
)


def _key(row: Any) -> ApiKey:
    m = row._mapping
    return ApiKey(
        id=m["id"],
        owner=m["owner"],
        prefix=m["prefix"],
        name=m["name"],
        created_at=m["created_at"],
        revoked_at=m["revoked_at"],
    )


class SqlApiKeyStore:
    """API keys in the store's database, through the store's engine and write transactions
    (so that SQLite's single writer is respected)."""

    def __init__(self, store: SqlEventStore) -> None:
        self._store = store

    @guarded
    async def add(self, key: ApiKey, key_hash: str) -> None:
        """`Conflict` if a key with this id or secret exists already."""
        values = {**{c.name: getattr(key, c.name) for c in _COLUMNS}, "key_hash": key_hash}
        try:
            async with self._store.begin_write() as conn:
                await conn.execute(sa.insert(t_keys).values(**values))
        except sa_exc.IntegrityError:
            raise Conflict(f"an API key with id {key.id} or this secret exists") from None

    @guarded
    async def find(self, key_hash: str) -> ApiKey | None:
        return await self._one(t_keys.c.key_hash == key_hash)

    @guarded
    async def get(self, key_id: str) -> ApiKey | None:
        return await self._one(t_keys.c.id == key_id)

    @guarded
    async def all(self) -> list[ApiKey]:
        query = sa.select(*_COLUMNS).order_by(t_keys.c.created_at, t_keys.c.id)
        async with self._store.engine.connect() as conn:
            return [_key(row) for row in await conn.execute(query)]

    @guarded
    async def revoke(self, key_id: str, at: float) -> bool:
        stmt = (
            sa.update(t_keys)
            .where(t_keys.c.id == key_id, t_keys.c.revoked_at.is_(None))
            .values(revoked_at=at)
        )
        async with self._store.begin_write() as conn:
            result = await conn.execute(stmt)
        return result.rowcount == 1

    async def _one(self, where: sa.ColumnElement[bool]) -> ApiKey | None:
        async with self._store.engine.connect() as conn:
            row = (await conn.execute(sa.select(*_COLUMNS).where(where))).first()
        return None if row is None else _key(row)


def _implements_the_port(keys: SqlApiKeyStore) -> ApiKeyStore:
    """Never called: mypy checks here that the adapter satisfies the service port."""
    return keys
