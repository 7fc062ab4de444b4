"""Reads from a hot standby (`--replica-database-url`), so that replays (`/events`, a
resumed or repeated stream of an ended response), `input_items` of an ended response (the
request its first event carries, read with the store's `read`), listings (a conversation's
items, the audit view's and the admin commands' reads, `export`) cost the primary little or
nothing. Two rules say when the standby may answer, each giving the read the primary would
give:

**Ended streams** (`read_ended`).
A stream's events never change once its terminal event is written, and that event, the
events before it and the row's terminal status commit in one transaction; a standby
replays transactions whole and in order. So where the standby's row of a stream is
terminal, the standby holds all of its events, whatever it lags by otherwise, and a read of
them there is the read the primary would give. Where it is not (the stream still runs, or
the standby has not replayed its end yet), the read goes to the primary: the position the
reader asks for is never one the standby may not have. This costs the primary nothing.

**Listings** (`read_caught_up`). A listing has no stream whose end says it is complete: its
rows may be any age. Its position is the primary's WAL position when it is asked
(`pg_current_wal_lsn()`, one statement that reads no table); the standby answers once it
has replayed up to there (`pg_last_wal_replay_lsn()`), which it is asked for every few
milliseconds for up to `CATCH_UP` seconds (not at all where it was already seen past
there: replay only moves on). Every commit the primary showed before the
listing was asked for is then in the standby's snapshot, so the listing misses nothing a
client could have been told of (an item it just added, a response that just ended). A
standby that has not caught up in time lags: the read goes to the primary, with a warning
at most every `LAG_SAID` seconds, and listings skip the standby for `LAG_BACKOFF` seconds
(so a standby far behind costs one wait a second, not one a listing).

Faults keep the primary serving: a replica URL that names a primary (not in recovery) is
refused at start with an error line and never used; a replica that cannot be reached or
fails a read is left alone for `RETRY_AFTER` seconds (one warning), its reads going to the
primary meanwhile. The lines show the replica's URL with the password as `***`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

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
CATCH_UP = 0.25  # seconds a listing waits for the standby to reach the primary's position
_POLL = 0.002  # seconds between two asks of the standby's replay position
LAG_BACKOFF = 1.0  # seconds listings skip a standby that did not catch up in time
LAG_SAID = 60.0  # seconds between two warnings that the standby lags
# How far the standby has replayed the WAL (NULL: not a standby, or one that replays
# nothing, which has replayed nowhere).
_REPLAYED = sa.text("SELECT pg_last_wal_replay_lsn()::text")


def lsn(text: str | None) -> int:
    """A WAL position as PostgreSQL writes it (`16/B374D848`) as a number; None as 0."""
    if not text:
        return 0
    high, _, low = text.partition("/")
    return int(high, 16) << 32 | int(low, 16)


def _why(exc: BaseException) -> str:
    """The driver's own first line: SQLAlchemy's wrapping adds the statement and its
    parameters (a listing's owner, ids), which the line must not carry."""
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).splitlines()
    return lines[0] if lines else type(cause).__name__


class Replica:
    """A hot standby's connections, and whether it may be read now."""

    def __init__(self, url: URL, settings: StoreSettings, engine: AsyncEngine) -> None:
        self.url = url
        self.pool = RawPool(url, settings)
        self.engine = engine  # SQLAlchemy's connections, for the listings
        self._checked = False  # found to be a standby once
        self._refused = False  # a primary: never read
        self._down_until = 0.0
        self.reads = 0  # reads it served (tests, metrics)
        self.listings = 0  # listings it served
        self._lagging_until = 0.0
        self._lag_said = -LAG_SAID
        self._replayed = 0  # the furthest WAL position the replica was seen to have replayed
        # A new connection may be to the standby restarted, which shows no more than it has
        # replayed since (less than before, for a while): seen anew.
        event.listen(engine.sync_engine, "connect", self._connected)
        # Streams the replica had not ended, when: asked again only after `RECHECK`, so a
        # live tail's page reads do not each pay a round trip to the replica first.
        self._running: dict[str, float] = {}

    def _connected(self, *_: object) -> None:
        self._replayed = 0

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
                "the replica %s cannot be read (%s); its reads (replays, listings) go to the "
                "primary for %.0fs",
                self._shown(),
                _why(exc),
                RETRY_AFTER,
            )
        self._down_until = time.monotonic() + RETRY_AFTER
        self._checked = False  # it may come back as something else (a promoted standby)
        self._replayed = 0  # or as another standby, which may have replayed less

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

    async def read_caught_up(
        self,
        position: Callable[[], Awaitable[str]],
        read: Callable[[AsyncConnection], Awaitable[T]],
    ) -> tuple[T] | None:
        """`read` run on the replica once it has replayed the primary's WAL up to
        `position()` (the primary's, asked now); None where the primary must answer: the
        replica is not usable, did not catch up within `CATCH_UP` seconds, or failed. The
        primary's own errors (asking its position) are raised as they are."""
        if time.monotonic() < self._lagging_until or not await self._usable():
            return None
        target = lsn(await position())
        try:
            async with self.engine.connect() as conn:
                deadline = time.monotonic() + CATCH_UP
                # Where the standby was last seen past the target, no round trip: replay
                # only moves on.
                while self._replayed < target:
                    found = lsn((await conn.execute(_REPLAYED)).scalar())
                    self._replayed = max(self._replayed, found)
                    if self._replayed >= target:
                        break
                    if time.monotonic() >= deadline:
                        self._lagged(target)
                        return None
                    await asyncio.sleep(_POLL)
                result = await read(conn)
        except RAW as exc:
            self.failed(exc)
            return None
        self.listings += 1
        return (result,)

    def _lagged(self, target: int) -> None:
        now = time.monotonic()
        self._lagging_until = now + LAG_BACKOFF
        if now - self._lag_said < LAG_SAID:
            return
        self._lag_said = now
        log.warning(
            "the replica %s lags: %s bytes of the primary's WAL not replayed after %.2fs; "
            "listings go to the primary meanwhile (said at most every %.0fs)",
            self._shown(),
            f"{target - self._replayed:,}" if self._replayed else "all",
            CATCH_UP,
            LAG_SAID,
        )

    async def close(self) -> None:
        await self.pool.close()
        await self.engine.dispose()
