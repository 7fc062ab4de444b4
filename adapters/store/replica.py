"""Reads of ended streams from a hot standby (`--replica-database-url`), so that replays
(`/events`, a resumed or repeated stream of an ended response) and `input_items` of an ended
response (the request its first event carries, read with the store's `read`)
cost the primary nothing.

A stream's events never change once its terminal event is written, and that event, the
events before it and the row's terminal status commit in one transaction; a standby
replays transactions whole and in order. So where the standby's row of a stream is
terminal, the standby holds all of its events, whatever it lags by otherwise, and a read of
them there is the read the primary would give. Where it is not (the stream still runs, or
the standby has not replayed its end yet), the read goes to the primary: the position the
reader asks for is never one the standby may not have.

Faults keep the primary serving: a replica URL that names a primary (not in recovery) is
refused at start with an error line and never used; a replica that cannot be reached or
fails a read is left alone for `RETRY_AFTER` seconds (one warning), its reads going to the
primary meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg
from sqlalchemy.engine import URL

from adapters.store.rawpool import RawPool
from adapters.store.settings import StoreSettings
from adapters.store.transient import RAW
from domain.objects import TERMINAL_STATUSES

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRY_AFTER = 5.0  # seconds a replica that failed is left alone
RECHECK = 1.0  # seconds before a stream found running on the replica is asked of it again
_RUNNING_KEPT = 10_000  # streams remembered as running at most (then forgotten at once)
_TERMINAL = tuple(sorted(TERMINAL_STATUSES))
_ENDED = "SELECT version FROM responses WHERE id = $1 AND status = ANY($2::text[])"
# A primary is not in recovery; a hot standby (or a server restoring) is.
_IN_RECOVERY = "SELECT pg_is_in_recovery()"


class Replica:
    """A hot standby's connections, and whether it may be read now."""

    def __init__(self, url: URL, settings: StoreSettings) -> None:
        self.url = url
        self.pool = RawPool(url, settings)
        self._checked = False  # found to be a standby once
        self._refused = False  # a primary: never read
        self._down_until = 0.0
        self.reads = 0  # reads it served (tests, metrics)
        # Streams the replica had not ended, when: asked again only after `RECHECK`, so a
        # live tail's page reads do not each pay a round trip to the replica first.
        self._running: dict[str, float] = {}

    def _shown(self) -> str:
        return self.url.render_as_string(hide_password=True)

    async def check(self) -> None:
        """At start: a replica that is a primary is refused for good; one that does not
        answer is said once, and tried again later."""
        await self._usable()

    async def _usable(self) -> bool:
        if self._refused or time.monotonic() < self._down_until:
            return False
        if self._checked:
            return True
        try:
            async with self.pool.connection() as conn:
                in_recovery = await conn.fetchval(_IN_RECOVERY)
        except RAW as exc:
            self.failed(exc)
            return False
        if not in_recovery:
            self._refused = True
            log.error(
                "the replica database URL %s names a primary (not in recovery), not a hot "
                "standby: replays stay on the primary; give --replica-database-url a "
                "standby's URL",
                self._shown(),
            )
            return False
        self._checked = True
        return True

    def failed(self, exc: BaseException) -> None:
        """A read or a check on the replica failed: its reads go to the primary for a while."""
        if time.monotonic() >= self._down_until:
            log.warning(
                "the replica %s cannot be read (%s); replays go to the primary for %.0fs",
                self._shown(),
                exc,
                RETRY_AFTER,
            )
        self._down_until = time.monotonic() + RETRY_AFTER
        self._checked = False  # it may come back as something else (a promoted standby)

    async def read_ended(
        self, stream_id: str, read: Callable[[asyncpg.Connection], Awaitable[T]]
    ) -> T | None:
        """`read` run on the replica where `stream_id` has ended there; None where the
        primary must answer instead: the replica is not usable, has not replayed the
        stream's end, or failed."""
        now = time.monotonic()
        if self._running.get(stream_id, 0.0) > now or not await self._usable():
            return None
        try:
            async with self.pool.connection() as conn:
                if await conn.fetchval(_ENDED, stream_id, _TERMINAL) is None:
                    if len(self._running) >= _RUNNING_KEPT:
                        self._running.clear()
                    self._running[stream_id] = now + RECHECK
                    return None
                result = await read(conn)
        except RAW as exc:
            self.failed(exc)
            return None
        self.reads += 1
        return result

    async def close(self) -> None:
        await self.pool.close()
