"""The log's partitions by day (PostgreSQL, migration 0008): reads that go to one partition,
making the coming days' partitions ahead of time, and dropping a whole day once its
responses have all ended and passed the retention.

`events` is partitioned by `resplog_period(stream_id)`: the unix day a stream id made by
`service/ids.py` carries (its first 8 hex digits are its second), 0 for any other id. The
days up to the migration are in `events_legacy`, a day with no partition of its own lands
in `events_default`, and each later day has `events_p<day>`. Neither the legacy nor the
default partition is ever dropped: `gc` deletes their expired responses row by row, as it
did before. SQLite keeps one table, and nothing here applies to it.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import msgspec
import sqlalchemy as sa
import sqlalchemy.exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.store.tables import BREAK
from adapters.store.transient import sqlstate
from domain.objects import TERMINAL_STATUSES
from service.ports import Day

log = logging.getLogger(__name__)

PERIOD = 86400.0  # seconds: `resplog_period`'s day (migration 0008)
AHEAD = 3  # days whose partitions exist before they begin
_NAME = re.compile(r"events_p(\d+)")
_UPPER = re.compile(r"TO \((\d+)\)")
# Serialises the processes that make or drop partitions (any 64-bit number of our own).
_LOCK = 0x7265_7370_6C6F_6701
# How long a partition's DDL waits for the locks it needs before giving up until the next
# time. Making a day's partition takes `events` in a mode that lets reads and writes go on
# (and the default partition, which nothing reads by name); dropping one takes all of
# `events`, and every statement on it queues behind the drop while it waits: so briefly.
_LOCK_TIMEOUT = "SET LOCAL lock_timeout = '5s'"
_DROP_LOCK_TIMEOUT = "SET LOCAL lock_timeout = '1s'"
# Those of migration 0006 for `events`, which each partition needs of its own, less the
# vacuum after inserts alone, which migration 0010 turned off: it froze nothing and made
# the appends' p99 worse (docs/performance.md, "Autovacuum under a sustained load").
_STORAGE = (
    "autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_threshold = -1, "
    "autovacuum_analyze_scale_factor = 0.01"
)
# Each column's statistics target (migration 0010): an `ANALYZE` samples 300 rows for each
# unit, so 3,000 pages at most instead of 30,000, and holds its snapshot (which stops the
# pruning of the hot row's old versions) a tenth as long. Every read of the log is by
# stream, through the primary key, whatever the statistics say.
_STATISTICS = 10
_COLUMNS = (
    "stream_id",
    "position",
    "type",
    "data",
    "facts",
    "recorded_at",
    "digest",
    "content_digest",
)
_TERMINAL = ", ".join(f"'{s}'" for s in sorted(TERMINAL_STATUSES))


def day_of(at: float) -> int:
    """The day (of `resplog_period`) that the unix time `at` falls in."""
    return int(at // PERIOD)


_HEX = frozenset("0123456789abcdef")


def period(stream_id: str) -> int:
    """`resplog_period(stream_id)` (migration 0008) computed here: the same day for every
    id, so that a read can name the partition that holds a stream. An id of 55 bytes that
    begins `resp_` goes by its next 8 digits if they are hex (those of `service/ids.py`
    are); every other id is day 0."""
    if len(stream_id.encode()) != 55 or not stream_id.startswith("resp_"):
        return 0
    digits = stream_id[5:13]
    return int(digits, 16) // int(PERIOD) if _HEX.issuperset(digits) else 0


class Layout(msgspec.Struct, frozen=True):
    """Which partitions a process knows of: the legacy one's end and the days made."""

    first: int  # the first day after the legacy partition's
    days: frozenset[int]

    def table_of(self, stream_id: str) -> str | None:
        """The partition that holds `stream_id`'s rows, read by name: a statement on
        `events` itself costs PostgreSQL 15 a plan over, or an opening of, every partition
        (about 3x a tail's page or a catch-up read at 90 days: docs/performance.md). None
        when this process cannot know (the default partition, or a day made since its
        last look): then `events`, whose pruning finds it whatever the partitions are."""
        day = period(stream_id)
        if day < self.first:
            return "events_legacy"
        return f"events_p{day}" if day in self.days else None


async def layout(conn: AsyncConnection) -> Layout | None:
    """The partitions as they are now; None on SQLite or before migration 0008."""
    if conn.dialect.name != "postgresql" or not await _partitioned(conn):
        return None
    return Layout(first=await _first_day(conn), days=frozenset(await days(conn)))


def same_partition(
    column: sa.ColumnElement[Any], stream_id: Any, dialect: str
) -> sa.ColumnElement[bool]:
    """What a read of one stream adds to `column = stream_id` so that PostgreSQL reads the
    stream's partition alone (the planner proves the others hold none of its rows); nothing
    on SQLite."""
    if dialect != "postgresql":
        return sa.true()
    return sa.func.resplog_period(column) == sa.func.resplog_period(stream_id)


async def _partitioned(conn: AsyncConnection) -> bool:
    kind = await conn.scalar(
        sa.text("SELECT relkind::text FROM pg_class WHERE oid = to_regclass('events')")
    )
    return bool(kind == "p")


async def days(conn: AsyncConnection) -> list[int]:
    """The days that have a partition of their own, oldest first (none on SQLite or before
    migration 0008)."""
    if conn.dialect.name != "postgresql" or not await _partitioned(conn):
        return []
    names = await conn.scalars(
        sa.text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'events'::regclass"
        )
    )
    return sorted(int(m[1]) for name in names if (m := _NAME.fullmatch(name)))


async def _first_day(conn: AsyncConnection) -> int:
    """The first day after the legacy partition's."""
    bound = await conn.scalar(
        sa.text(
            "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c "
            "WHERE c.oid = 'events_legacy'::regclass"
        )
    )
    found = _UPPER.search(str(bound))
    return int(found[1]) if found else 0


async def ensure(conn: AsyncConnection, now: float, since: int | None = None) -> list[int]:
    """Make the partitions of today (or of each day from `since`, past the legacy ones)
    and the next `AHEAD` days that do not exist yet, each in a transaction of its own;
    returns the days made. `conn` is outside a transaction. A day whose rows are already
    in the default partition (its partition was late) keeps them there: it is left
    without a partition, and logged."""
    if conn.dialect.name != "postgresql" or not await _partitioned(conn):
        return []
    have = set(await days(conn))
    first = max(await _first_day(conn), day_of(now) if since is None else since)
    await conn.commit()
    wanted = range(first, day_of(now) + AHEAD + 1)
    made: list[int] = []
    for day in wanted:
        if day in have:
            continue
        try:
            async with conn.begin():
                if await _make(conn, day):
                    made.append(day)
        except sa_exc.DBAPIError as exc:
            log.warning("the log's partition for day %d was not made: %s", day, exc.orig)
    return made


async def _make(conn: AsyncConnection, day: int) -> bool:
    await conn.execute(sa.text(_LOCK_TIMEOUT))
    await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK})
    if day in await days(conn):  # another process made it meanwhile
        return False
    name = f"events_p{day}"
    await conn.execute(
        sa.text(
            f"CREATE TABLE {name} (LIKE events INCLUDING DEFAULTS INCLUDING STORAGE) "
            f"WITH ({_STORAGE})"
        )
    )
    targets = "".join(f"ALTER COLUMN {c} SET STATISTICS {_STATISTICS}, " for c in _COLUMNS)
    primary = f"ADD CONSTRAINT pk_{name} PRIMARY KEY (stream_id, position)"
    await conn.execute(sa.text(f"ALTER TABLE {name} {targets}{primary}"))
    # Takes `events` for a moment (SHARE UPDATE EXCLUSIVE: reads and writes go on) and
    # checks that the default partition holds no row of this day.
    await conn.execute(
        sa.text(
            f"ALTER TABLE events ATTACH PARTITION {name} FOR VALUES FROM ({day}) TO ({day + 1})"
        )
    )
    return True


def _of_day(day: int) -> str:
    """The `responses` rows whose stream is in `day`'s partition: found through the
    `created_at` index (a response's id carries the second it was created), one day either
    side for clocks that differ, then exactly by the id."""
    return (
        f"created_at >= {(day - 1) * PERIOD} AND created_at < {(day + 2) * PERIOD} "
        f"AND resplog_period(id) = {day}"
    )


async def expired(conn: AsyncConnection, cutoff: float) -> list[Day]:
    """The days whose partition ends before `cutoff`, with what is in them."""
    found: list[Day] = []
    for day in await days(conn):
        if (day + 1) * PERIOD > cutoff:
            break
        row = (
            await conn.execute(
                sa.text(
                    "SELECT count(*), count(*) FILTER (WHERE status NOT IN "
                    f"({_TERMINAL})), coalesce(sum(version + 1), 0) "
                    f"FROM responses WHERE {_of_day(day)}"
                )
            )
        ).one()
        found.append(Day(day=day, responses=row[0], running=row[1], events=int(row[2])))
    return found


async def drop(conn: AsyncConnection, day: int, *, breaks: bool = True) -> Day | None:
    """Delete `day`'s responses and drop its partition, in one transaction (`conn` is
    outside one), raising the chain-break count if any went (`breaks`: where it is kept);
    None, with nothing changed, if one of its responses has not ended (it keeps the whole
    day), the day has no partition, or a long statement on `events` (an export, `verify
    --all`) kept the drop from its lock for a second: the next run takes it. Never a
    `DELETE` of events."""
    try:
        async with conn.begin():
            return await _drop(conn, day, breaks)
    except _Kept:
        return None
    except sa_exc.DBAPIError as exc:
        if sqlstate(exc) != "55P03":  # lock_not_available
            raise
        log.warning("day %d was not dropped: `events` was busy (%s); next run", day, exc.orig)
        return None


class _Kept(Exception):
    """A day that must stay: what its transaction did is rolled back."""


async def _drop(conn: AsyncConnection, day: int, breaks: bool) -> Day:
    await conn.execute(sa.text(_DROP_LOCK_TIMEOUT))
    await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK})
    if day not in await days(conn):
        raise _Kept
    gone = (
        await conn.execute(
            sa.text(
                f"DELETE FROM responses WHERE {_of_day(day)} AND status IN ({_TERMINAL}) "
                "RETURNING version"
            )
        )
    ).scalars()
    versions = list(gone)
    # Not one response left of that day: a running one (or one made since by a host whose
    # clock is behind) keeps the day until it ends.
    if await conn.scalar(sa.text(f"SELECT count(*) FROM responses WHERE {_of_day(day)}")):
        raise _Kept
    # Takes all of `events` for a moment; the lock timeout bounds the wait.
    await conn.execute(sa.text(f"DROP TABLE events_p{day}"))
    if versions and breaks:  # a chain that held one ends before it (service/prompts/chains.py)
        await conn.execute(BREAK)
    return Day(day=day, responses=len(versions), running=0, events=sum(v + 1 for v in versions))
