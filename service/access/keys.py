"""API keys: their secrets (shown once, stored only as a hash) and the create, list, revoke
and authenticate use-cases.

A secret is 256 random bits, so a plain SHA-256 of it is enough to store: nobody can search
that space from a stolen table, which is what a pepper or a slow hash (bcrypt, argon2) would
defend a low-entropy password against. docs/security.md has the whole reasoning.
"""

from __future__ import annotations

import hashlib
import re
import secrets

import msgspec

from domain.errors import InvalidRequest, NotFound
from service.ports import ApiKey, ApiKeyStore

SECRET_PREFIX = "rsk-"
PREFIX_CHARS = 12  # shown in lists: "rsk-" and 8 of the ~43 random characters
_OWNER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:+-]{0,127}")
_NAME_MAX = 200


class NewKey(msgspec.Struct, frozen=True):
    """A key just created, with its secret: the only time the secret exists outside the
    client's hands."""

    key: ApiKey
    secret: str


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def check_owner(owner: str) -> str:
    if not _OWNER.fullmatch(owner):
        raise InvalidRequest(
            f"invalid owner {owner[:80]!r}: 1 to 128 characters of letters, digits and "
            "._@:+- (starting with a letter or digit)",
            param="owner",
        )
    return owner


def _check_name(name: str | None) -> str | None:
    if name is not None and (len(name) > _NAME_MAX or not name.isprintable()):
        raise InvalidRequest(
            f"invalid key name: at most {_NAME_MAX} printable characters", param="name"
        )
    return name


async def create_key(store: ApiKeyStore, owner: str, name: str | None, *, now: float) -> NewKey:
    """A new key for `owner`; its secret is returned here and never stored."""
    secret = new_secret()
    key = ApiKey(
        id=f"key_{secrets.token_hex(12)}",
        owner=check_owner(owner),
        prefix=secret[:PREFIX_CHARS],
        name=_check_name(name),
        created_at=now,
    )
    await store.add(key, hash_secret(secret))
    return NewKey(key, secret)


async def list_keys(store: ApiKeyStore, owner: str | None = None) -> list[ApiKey]:
    """Every key (or `owner`'s), oldest first; never a secret, which is not stored."""
    return [key for key in await store.all() if owner in (None, key.owner)]


async def revoke_key(store: ApiKeyStore, key_id: str, *, now: float) -> ApiKey:
    """Revoke a key for good; an unknown or already revoked key is an error."""
    if await store.revoke(key_id, now):
        revoked = await store.get(key_id)
        assert revoked is not None
        return revoked
    existing = await store.get(key_id)
    if existing is None:
        raise NotFound(f"no API key with id {key_id!r}")
    raise InvalidRequest(f"API key {key_id} is already revoked", param="key_id")


async def authenticate(store: ApiKeyStore, secret: str) -> ApiKey | None:
    """The live key with this secret, or None (unknown or revoked)."""
    if not secret.startswith(SECRET_PREFIX):
        return None
    key = await store.find(hash_secret(secret))
    return key if key is not None and key.revoked_at is None else None
