"""Admission: key -> principal through the cache, the token bucket, stream slots."""

from __future__ import annotations

import pytest

from adapters.store.keys import SqlApiKeyStore
from domain.errors import RateLimited, Unauthenticated
from service.access import keys
from service.access.admission import ANONYMOUS_PRINCIPAL, Access, AccessPolicy, KeyCache, Principal
from service.access.quotas import QueuedBytes, RateLimiter, StreamSlots, TokenBucket
from service.ports import ApiKey


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Counting:
    """The real key store, counting lookups (to see the cache spare them)."""

    def __init__(self, store: SqlApiKeyStore) -> None:
        self.store = store
        self.finds = 0

    async def find(self, key_hash: str) -> ApiKey | None:
        self.finds += 1
        return await self.store.find(key_hash)

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)


async def keyed(key_store: SqlApiKeyStore, **policy: object) -> tuple[Access, Counting, str, Clock]:
    store, clock = Counting(key_store), Clock()
    new = await keys.create_key(key_store, "alice", None, now=1.0)
    access = Access(AccessPolicy(auth="keys", **policy), store, clock)  # type: ignore[arg-type]
    return access, store, new.secret, clock


async def key_id(store: Counting) -> str:
    return (await store.store.all())[0].id


async def test_without_auth_everyone_is_the_anonymous_owner() -> None:
    access = Access(AccessPolicy(auth="none"), None)
    assert await access.admit(None) == ANONYMOUS_PRINCIPAL
    assert await access.admit("rsk-anything") == ANONYMOUS_PRINCIPAL


async def test_a_key_admits_its_owner_and_a_missing_or_wrong_key_is_refused(
    key_store: SqlApiKeyStore,
) -> None:
    access, store, secret, _ = await keyed(key_store)
    principal = await access.admit(secret)
    assert principal == Principal(key_id=await key_id(store), owner="alice")
    for bad in (None, "", "rsk-wrong", secret[:-1]):
        with pytest.raises(Unauthenticated):
            await access.admit(bad)


async def test_a_revoked_key_is_refused_once_its_cache_entry_expires(
    key_store: SqlApiKeyStore,
) -> None:
    access, store, secret, clock = await keyed(key_store, key_cache_s=10.0)
    await access.admit(secret)
    await keys.revoke_key(store, await key_id(store), now=2.0)
    clock.now += 9.9
    assert (await access.admit(secret)).owner == "alice"  # still within the documented bound
    clock.now += 0.2
    with pytest.raises(Unauthenticated):
        await access.admit(secret)


async def test_with_no_cache_a_revocation_applies_to_the_next_request(
    key_store: SqlApiKeyStore,
) -> None:
    access, store, secret, _ = await keyed(key_store, key_cache_s=0.0)
    await access.admit(secret)
    await keys.revoke_key(store, await key_id(store), now=2.0)
    with pytest.raises(Unauthenticated):
        await access.admit(secret)


async def test_lookups_are_cached_good_and_bad(key_store: SqlApiKeyStore) -> None:
    access, store, secret, _ = await keyed(key_store)
    for _ in range(5):
        await access.admit(secret)
        with pytest.raises(Unauthenticated):
            await access.admit("rsk-wrong")
    assert store.finds == 2


def test_the_cache_is_bounded_and_drops_the_oldest_first() -> None:
    clock = Clock()
    cache = KeyCache(ttl=60, entries=3, clock=clock)
    for i in range(10):
        cache.put(f"h{i}", None)
    assert len(cache) == 3
    assert cache.get("h0") == (False, None) and cache.get("h9") == (True, None)


def test_a_token_bucket_allows_its_burst_then_its_rate() -> None:
    bucket = TokenBucket(rate=2.0, burst=3.0, now=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.5)
    assert bucket.take(0.5) == 0.0
    assert bucket.take(0.5) == pytest.approx(0.5)
    assert bucket.take(100.0) == 0.0 and bucket.tokens == pytest.approx(2.0)  # capped at burst


def test_the_rate_limit_is_per_key_and_says_when_to_retry() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=1.0, burst=2, clock=clock)
    limiter.check("a")
    limiter.check("a")
    with pytest.raises(RateLimited) as info:
        limiter.check("a")
    assert info.value.retry_after == pytest.approx(1.0)
    limiter.check("b")  # another key has its own bucket
    clock.now += 1.0
    limiter.check("a")


def test_a_zero_rate_is_no_limit() -> None:
    limiter = RateLimiter(rate=0, burst=0, clock=Clock())
    for _ in range(1000):
        limiter.check("a")


def test_stream_slots_are_per_key_and_released_once() -> None:
    slots = StreamSlots(limit=2)
    one, two = slots.acquire("a"), slots.acquire("a")
    with pytest.raises(RateLimited):
        slots.acquire("a")
    slots.acquire("b")
    one.release()
    one.release()  # twice is harmless: it must not free another stream's slot
    assert slots.open("a") == 1
    slots.acquire("a")
    two.release()
    assert slots.open("a") == 1


def test_queued_bytes_are_bounded_per_key_and_released_once() -> None:
    queued = QueuedBytes()
    first = queued.hold("a", 600, limit=1000)
    with pytest.raises(RateLimited, match="600 held, at most 1000"):
        queued.hold("a", 500, limit=1000)
    queued.hold("b", 500, limit=1000)  # another key's bytes are its own
    second = queued.hold("a", 400, limit=1000)
    first.release()
    first.release()  # twice is harmless
    assert queued.held("a") == 400
    second.release()
    assert queued.held("a") == 0
    # A key that holds nothing may send one message over the bound; 0 is no bound.
    queued.hold("a", 5000, limit=1000).release()
    queued.hold("a", 5000, limit=0)
    queued.hold("a", 5000, limit=0)


async def test_admit_charges_the_rate_of_the_principal(key_store: SqlApiKeyStore) -> None:
    access, _, secret, clock = await keyed(key_store, rate_limit=1.0, rate_burst=1)
    await access.admit(secret)
    with pytest.raises(RateLimited):
        await access.admit(secret)
    clock.now += 1.0
    await access.admit(secret)
