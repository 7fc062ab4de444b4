"""API key use-cases over the real key store (SQLite): secrets, hashes, revocation."""

from __future__ import annotations

import hashlib

import pytest

from adapters.store.keys import SqlApiKeyStore
from domain.errors import InvalidRequest, NotFound
from service.access import keys as uc


async def test_a_new_key_is_stored_only_as_the_sha256_of_its_secret(
    key_store: SqlApiKeyStore,
) -> None:
    new = await uc.create_key(key_store, "alice", "ci", now=100.0)
    assert new.secret.startswith("rsk-") and len(new.secret) >= 40
    assert await key_store.find(hashlib.sha256(new.secret.encode()).hexdigest()) == new.key
    assert await key_store.all() == [new.key]  # and nothing else: no secret
    stored = await key_store.get(new.key.id)
    assert stored is not None
    assert new.secret not in repr(stored)
    assert (stored.owner, stored.name, stored.created_at, stored.revoked_at) == (
        "alice",
        "ci",
        100.0,
        None,
    )
    assert stored.prefix == new.secret[: uc.PREFIX_CHARS] and stored.id.startswith("key_")


async def test_every_key_is_different(key_store: SqlApiKeyStore) -> None:
    made = [await uc.create_key(key_store, "alice", None, now=1.0) for _ in range(20)]
    assert len({m.secret for m in made}) == len({m.key.id for m in made}) == 20


async def test_authenticate_finds_the_live_key_of_a_secret_only(key_store: SqlApiKeyStore) -> None:
    new = await uc.create_key(key_store, "alice", None, now=1.0)
    assert await uc.authenticate(key_store, new.secret) == new.key
    assert await uc.authenticate(key_store, new.secret + "x") is None
    assert await uc.authenticate(key_store, "sk-not-ours") is None
    await uc.revoke_key(key_store, new.key.id, now=2.0)
    assert await uc.authenticate(key_store, new.secret) is None


async def test_revoke_refuses_an_unknown_or_already_revoked_key(key_store: SqlApiKeyStore) -> None:
    new = await uc.create_key(key_store, "alice", None, now=1.0)
    revoked = await uc.revoke_key(key_store, new.key.id, now=5.0)
    assert revoked.revoked_at == 5.0
    with pytest.raises(InvalidRequest, match="already revoked"):
        await uc.revoke_key(key_store, new.key.id, now=6.0)
    assert (await key_store.get(new.key.id)).revoked_at == 5.0  # type: ignore[union-attr]
    with pytest.raises(NotFound, match="key_nope"):
        await uc.revoke_key(key_store, "key_nope", now=6.0)


@pytest.mark.parametrize("owner", ["", " alice", "a b", "-x", "a" * 129, "al\x00ice", "ä"])
async def test_owners_are_short_plain_names(key_store: SqlApiKeyStore, owner: str) -> None:
    with pytest.raises(InvalidRequest, match="invalid owner"):
        await uc.create_key(key_store, owner, None, now=1.0)
    assert await key_store.all() == []


async def test_a_key_name_must_be_printable_and_short(key_store: SqlApiKeyStore) -> None:
    for name in ("tab\there", "n" * 201):
        with pytest.raises(InvalidRequest, match="key name"):
            await uc.create_key(key_store, "alice", name, now=1.0)
    assert await key_store.all() == []
