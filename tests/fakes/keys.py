"""An in-memory `ApiKeyStore` for service-level tests, written against the port."""

from __future__ import annotations

import msgspec

from service.ports import ApiKey


class MemoryKeyStore:
    """Keys by id, with their hashes; counts lookups so that tests can see the cache work."""

    def __init__(self) -> None:
        self.keys: dict[str, ApiKey] = {}
        self.hashes: dict[str, str] = {}  # hash -> key id
        self.finds = 0

    async def add(self, key: ApiKey, key_hash: str) -> None:
        if key.id in self.keys or key_hash in self.hashes:
            raise ValueError("duplicate key")
        self.keys[key.id] = key
        self.hashes[key_hash] = key.id

    async def find(self, key_hash: str) -> ApiKey | None:
        self.finds += 1
        key_id = self.hashes.get(key_hash)
        return None if key_id is None else self.keys[key_id]

    async def get(self, key_id: str) -> ApiKey | None:
        return self.keys.get(key_id)

    async def all(self) -> list[ApiKey]:
        return sorted(self.keys.values(), key=lambda k: (k.created_at, k.id))

    async def revoke(self, key_id: str, at: float) -> bool:
        key = self.keys.get(key_id)
        if key is None or key.revoked_at is not None:
            return False
        self.keys[key_id] = msgspec.structs.replace(key, revoked_at=at)
        return True
