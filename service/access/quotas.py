"""Per-key quotas of this process: a request rate (token bucket) and concurrent streams.

The counters live in the process's memory, so with N replicas a key may use N times each
limit; docs/security.md says so. They only ever hold keys that authenticated, so their size
is bounded by the number of keys, not by what clients send.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from domain.errors import RateLimited


class TokenBucket:
    """`rate` tokens a second, at most `burst` saved up; a request takes one."""

    __slots__ = ("burst", "rate", "tokens", "updated")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.updated = burst, now

    def take(self, now: float) -> float:
        """0 if a token was taken, else the seconds until one will be there."""
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


class RateLimiter:
    """One token bucket per key; a rate of 0 turns it off."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate = rate
        self.burst = float(burst if burst > 0 else max(1, math.ceil(rate)))
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}

    def check(self, key_id: str) -> None:
        """Count one request of `key_id`; raises `RateLimited` when it is over its rate."""
        if self.rate <= 0:
            return
        now = self._clock()
        bucket = self._buckets.get(key_id)
        if bucket is None:
            bucket = self._buckets[key_id] = TokenBucket(self.rate, self.burst, now)
        wait = bucket.take(now)
        if wait > 0:
            raise RateLimited(
                f"Rate limit reached: at most {self.rate:g} requests per second per API key "
                f"(burst {self.burst:g}). Try again in {wait:.2f}s.",
                retry_after=wait,
            )


class Slot:
    """One stream's hold on its key's concurrency; releasing twice is harmless."""

    __slots__ = ("_release",)

    def __init__(self, release: Callable[[], None] | None) -> None:
        self._release = release

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()


class StreamSlots:
    """How many streams each key has open; 0 means no limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}

    def acquire(self, key_id: str) -> Slot:
        count = self._open.get(key_id, 0)
        if 0 < self.limit <= count:
            raise RateLimited(
                f"Too many concurrent streams: at most {self.limit} per API key. Close one "
                "and try again.",
                retry_after=1.0,
            )
        self._open[key_id] = count + 1
        return Slot(lambda: self._done(key_id))

    def open(self, key_id: str) -> int:
        return self._open.get(key_id, 0)

    def _done(self, key_id: str) -> None:
        left = self._open.get(key_id, 0) - 1
        if left > 0:
            self._open[key_id] = left
        else:
            self._open.pop(key_id, None)


class QueuedBytes:
    """How many bytes of WebSocket messages each key holds, received and not yet answered
    to their end, across all its connections; the bound is the caller's (0: none)."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}

    def hold(self, key_id: str, size: int, limit: int) -> Slot:
        """Count `size` more bytes of `key_id` until the slot is released; `RateLimited`
        if that would pass `limit` (a key holding nothing may always send one message)."""
        held = self._held.get(key_id, 0)
        if held and 0 < limit < held + size:
            raise RateLimited(
                f"Too many bytes of response.create messages waiting for this API key: "
                f"{held} held, at most {limit} across its WebSocket connections; wait for a "
                "response to end.",
                retry_after=1.0,
            )
        self._held[key_id] = held + size
        return Slot(lambda: self._done(key_id, size))

    def held(self, key_id: str) -> int:
        return self._held.get(key_id, 0)

    def _done(self, key_id: str, size: int) -> None:
        left = self._held.get(key_id, 0) - size
        if left > 0:
            self._held[key_id] = left
        else:
            self._held.pop(key_id, None)
