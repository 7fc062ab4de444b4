"""Who a request acts for, and whether it may go ahead now: API key -> principal (through a
small cache), then the key's quotas.

The cache keeps what a key hash resolved to for `key_cache_s` seconds, so a revocation takes
effect in every process within that bound; unknown hashes are cached too (a client retrying
a bad key costs no query), and the cache is bounded, oldest entries evicted first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Literal

import msgspec

from domain.errors import Unauthenticated
from service.access.keys import authenticate, hash_secret
from service.access.quotas import QueuedBytes, RateLimiter, Slot, StreamSlots
from service.ports import ApiKeyStore

ANONYMOUS = "anonymous"


class AccessPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How requests are admitted; every field is a `serve` flag (docs/security.md)."""

    auth: Literal["keys", "none"] = "none"
    rate_limit: float = 0.0  # requests per second per key; 0 = off
    rate_burst: int = 0  # 0 = the rate, rounded up (at least 1)
    max_streams_per_key: int = 256  # open SSE/JSONL streams per key; 0 = unlimited
    key_cache_s: float = 10.0  # how stale a key lookup may be (the revocation bound)
    key_cache_entries: int = 10_000


class Principal(msgspec.Struct, frozen=True):
    """The caller: the key it used and the owner (tenant) the key belongs to."""

    key_id: str
    owner: str


ANONYMOUS_PRINCIPAL = Principal(key_id=ANONYMOUS, owner=ANONYMOUS)


class KeyCache:
    """Key hash -> principal (or None: no live key), each for `ttl` seconds."""

    def __init__(self, ttl: float, entries: int, clock: Callable[[], float]) -> None:
        self.ttl, self.entries = ttl, entries
        self._clock = clock
        self._map: OrderedDict[str, tuple[Principal | None, float]] = OrderedDict()

    def get(self, key_hash: str) -> tuple[bool, Principal | None]:
        """(found, principal); an expired entry is not found."""
        hit = self._map.get(key_hash)
        if hit is None or hit[1] <= self._clock():
            return False, None
        return True, hit[0]

    def put(self, key_hash: str, principal: Principal | None) -> None:
        if self.ttl <= 0:
            return
        self._map.pop(key_hash, None)
        self._map[key_hash] = (principal, self._clock() + self.ttl)
        while len(self._map) > self.entries:
            self._map.popitem(last=False)

    def __len__(self) -> int:
        return len(self._map)


class Access:
    """The gate every `/v1` request passes: `admit` it, and `open_stream` for a stream."""

    def __init__(
        self,
        policy: AccessPolicy,
        keys: ApiKeyStore | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if policy.auth == "keys" and keys is None:
            raise ValueError("auth 'keys' needs a key store")
        self.policy = policy
        self._keys = keys
        self.cache = KeyCache(policy.key_cache_s, policy.key_cache_entries, clock)
        self.rate = RateLimiter(policy.rate_limit, policy.rate_burst, clock)
        self.streams = StreamSlots(policy.max_streams_per_key)
        self.queued = QueuedBytes()  # WebSocket messages waiting (adapters/http/sockets.py)

    async def admit(self, secret: str | None) -> Principal:
        """The principal of a request bearing `secret`, charged one request of its rate;
        raises `Unauthenticated` or `RateLimited`."""
        principal = await self._principal(secret)
        self.rate.check(principal.key_id)
        return principal

    def charge(self, principal: Principal) -> None:
        """Count one more request of an admitted principal's key (a `response.create` on
        an open WebSocket is a request like a POST); raises `RateLimited`."""
        self.rate.check(principal.key_id)

    def open_stream(self, principal: Principal) -> Slot:
        """Hold one of the key's stream slots until the stream ends (`RateLimited` if none)."""
        return self.streams.acquire(principal.key_id)

    async def _principal(self, secret: str | None) -> Principal:
        if self.policy.auth == "none":
            return ANONYMOUS_PRINCIPAL
        if not secret:
            raise Unauthenticated(
                "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'."
            )
        digest = hash_secret(secret)
        found, principal = self.cache.get(digest)
        if not found:
            assert self._keys is not None
            key = await authenticate(self._keys, secret)
            principal = None if key is None else Principal(key_id=key.id, owner=key.owner)
            self.cache.put(digest, principal)
        if principal is None:
            raise Unauthenticated("Incorrect API key provided (unknown or revoked).")
        return principal
