"""Leases on the `responses` rows (the `Leases` and `Doorbells` ports): claiming queued
work, taking over expired leases, renewing all of a process's leases in one statement.

A lease is `lease_owner` (a process identity) and `lease_expires_at`. The store's append
guard accepts a leased stream's events only from its owner, so whoever holds the lease is
the stream's one writer; taking a lease over (an expired one) fences the old owner out even
if it is still alive. Every taking is one guarded UPDATE, so of two takers exactly one wins.

On PostgreSQL the lease times are the database's clock (`clock_timestamp()`), so processes
on machines whose clocks disagree still agree on expiry; claiming uses `FOR UPDATE SKIP
LOCKED`, so concurrent claimers skip each other's rows instead of queueing behind them.
Renewal also skips rows locked at that moment (by this process's own flush, which holds
them for a few milliseconds): waiting could deadlock against the flush, which locks many
rows in another order, and a skipped renewal is simply repeated by the next pass.

Claiming, which every process's worker polls for once a second, is one statement of its own
on PostgreSQL, sent on the store's asyncpg pool (rawpool.py): through SQLAlchemy each poll
built its statement and cache key again and ran three round trips (BEGIN, the UPDATE,
COMMIT), about a third of what an idle server spent (docs/performance.md, "An idle
server").

Renewal runs statements built once per process, the ids bound at each pass (as one array on
PostgreSQL, a chunk at a time on SQLite). Built anew each pass (a literal array of the ids,
its types, the clock's expression), the statements left some 80 objects in reference cycles,
freed only by the cyclic collector, whose young generation runs only once 50,000 more
containers were allocated than freed (adapters/cli/memory.py): under a steady load that took
minutes, and a server's memory crept up meanwhile (docs/performance.md, "Memory under a
steady load").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from adapters.store import citus
from adapters.store.postgres import PostgresEventStore
from adapters.store.sql import SqlEventStore
from adapters.store.tables import responses as t
from adapters.store.transient import RAW, guarded, is_transient
from domain.reasons import CancelReason
from service.ports import CancelBell, Claim, Renewal

_UNFINISHED = ("queued", "in_progress")
_CHUNK = 500  # ids per IN (...) list on SQLite, far below its bound-parameter limit
c = t.c

# Now, in unix seconds, on PostgreSQL's clock; on Citus the statement's start (see `_now`).
_PG_NOW = sa.cast(sa.extract("epoch", sa.func.clock_timestamp()), sa.Double)
_CITUS_NOW = sa.cast(sa.extract("epoch", sa.func.statement_timestamp()), sa.Double)
# The ids of a renewal on PostgreSQL, bound as one array.
_IDS = sa.bindparam("ids", type_=postgresql.ARRAY(sa.Text))

# `claim` on PostgreSQL: the statement SQLAlchemy built from the expressions of `claim`
# (SQLite's path), with `FOR UPDATE SKIP LOCKED`, written out once.
_CLAIM_PG = """
UPDATE responses
SET lease_owner = $1,
    lease_expires_at = CAST(EXTRACT(epoch FROM clock_timestamp()) AS DOUBLE PRECISION) + $2
WHERE id IN (
    SELECT id FROM responses
    WHERE status = 'queued' AND (lease_owner IS NULL
        OR lease_expires_at < CAST(EXTRACT(epoch FROM clock_timestamp()) AS DOUBLE PRECISION))
    ORDER BY created_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED)
RETURNING id, cancel_reason
"""


def _reason(flag: str | None) -> CancelReason | None:
    """Why a flagged response must stop, as its `cancel_reason` says (None if not flagged)."""
    return None if flag is None else CancelReason(flag)


class SqlLeases:
    """Leases and doorbells over one store; the owner is the store's `lease_owner`."""

    def __init__(self, store: SqlEventStore) -> None:
        owner = store.settings.lease_owner
        if owner is None:
            raise ValueError("leases need a store opened with lease_owner=<process identity>")
        self.owner: str = owner
        self.ttl = store.settings.lease_ttl
        self._store = store
        self._pg = store.dialect == "postgresql"
        self._raw = store.raw if isinstance(store, PostgresEventStore) else None
        # PostgreSQL's renewal: the leases of `ids` this process still holds, renewed (rows
        # locked at the moment skipped), and the same leases read (built once: see above).
        mine = sa.and_(c.id == sa.any_(_IDS), c.lease_owner == owner)
        locked = sa.select(c.id).where(mine).with_for_update(skip_locked=True)
        self._renew_pg = (
            sa.update(t)
            .where(c.id.in_(locked.scalar_subquery()))
            .values(lease_expires_at=_PG_NOW + self.ttl)
            .returning(c.id, c.cancel_reason)
        )
        self._mine_pg = sa.select(c.id, c.cancel_reason).where(mine)
        # SQLite's: the same, a chunk of ids at a time (its limit on bound variables), the
        # lease's end on our clock.
        mine_here = sa.and_(c.id.in_(sa.bindparam("ids", expanding=True)), c.lease_owner == owner)
        self._renew_lite = (
            sa.update(t)
            .where(mine_here)
            .values(lease_expires_at=sa.bindparam("until", type_=sa.Double))
            .returning(c.id, c.cancel_reason)
        )

    # --- Leases -------------------------------------------------------------------------

    @guarded
    async def claim(self, limit: int) -> list[Claim]:
        if limit <= 0:
            return []
        if self._raw is not None and self._citus():
            # Citus takes no `FOR UPDATE` across shards: the candidates, then each taken by
            # a guarded update of its own row (of two claimers, one wins each).
            async with self._raw.connection() as raw:
                found = [r[0] for r in await raw.fetch(citus.QUEUED, limit)]
                taken = [
                    await raw.fetchrow(citus.TAKE_QUEUED, self.owner, self.ttl, i) for i in found
                ]
            return [Claim(r[0], _reason(r[1])) for r in taken if r is not None]
        if self._raw is not None:
            async with self._raw.connection() as raw:
                records = await raw.fetch(_CLAIM_PG, self.owner, self.ttl, limit)
            return [Claim(r[0], _reason(r[1])) for r in records]
        now = self._now()
        pick = (
            sa.select(c.id)
            .where(c.status == "queued", sa.or_(c.lease_owner.is_(None), c.lease_expires_at < now))
            .order_by(c.created_at, c.id)
            .limit(limit)
        )
        return await self._take(c.id.in_(pick.scalar_subquery()), now)

    @guarded
    async def acquire(self, response_id: str) -> Claim | None:
        now = self._now()
        free = sa.or_(
            c.lease_owner.is_(None), c.lease_owner == self.owner, c.lease_expires_at < now
        )
        taken = await self._take(sa.and_(c.id == response_id, c.status.in_(_UNFINISHED), free), now)
        return taken[0] if taken else None

    @guarded
    async def renew(self, response_ids: Sequence[str]) -> Renewal:
        ids = list(dict.fromkeys(response_ids))
        held: dict[str, Any] = {}
        if not ids:
            return Renewal(held=frozenset(), cancel={})
        if self._raw is not None and self._citus():
            # One row a statement, each on its shard. It may wait for a flush that holds
            # the row, but holds no other row meanwhile: no deadlock. A row whose shard
            # cannot be reached (its worker stopped) counts as still held, as every row
            # does through an outage of the whole database (the pass fails), and the
            # others are renewed all the same; its own appends fail meanwhile.
            unknown: list[str] = []
            last: BaseException | None = None
            async with self._raw.connection() as raw:
                for i in ids:
                    try:
                        row = await raw.fetchrow(citus.RENEW_ONE, self.owner, self.ttl, i)
                    except RAW as exc:
                        if not is_transient(exc):
                            raise
                        unknown.append(i)
                        last = exc
                        continue
                    if row is not None:
                        held[row[0]] = row
            if last is not None and len(unknown) == len(ids):
                raise last  # nothing answered: the database is away
            cancel = {i: r for i, row in held.items() if (r := _reason(row[1])) is not None}
            return Renewal(held=frozenset(held) | frozenset(unknown), cancel=cancel)
        if self._pg:  # all ids as one array: one statement for every lease held
            async with self._store._begin_write() as conn:
                held.update(
                    {row.id: row for row in await conn.execute(self._renew_pg, {"ids": ids})}
                )
                skipped = [i for i in ids if i not in held]
                if skipped:  # locked just now: still ours if the row says so
                    found = await conn.execute(self._mine_pg, {"ids": skipped})
                    held.update({row.id: row for row in found})
            cancel = {
                i: r for i, row in held.items() if (r := _reason(row.cancel_reason)) is not None
            }
            return Renewal(held=frozenset(held), cancel=cancel)
        async with self._store._begin_write() as conn:
            for chunk in _chunks(ids, _CHUNK):
                until = time.time() + self.ttl
                # No row is skipped here (SQLite locks the whole database for the write):
                # what it does not return is gone, or not ours.
                renewed = await conn.execute(self._renew_lite, {"ids": chunk, "until": until})
                held.update({row.id: row for row in renewed})
        cancel = {i: r for i, row in held.items() if (r := _reason(row.cancel_reason)) is not None}
        return Renewal(held=frozenset(held), cancel=cancel)

    @guarded
    async def expired(self, limit: int) -> list[str]:
        now = self._now()
        lapsed = sa.and_(c.lease_owner.is_not(None), c.lease_expires_at < now)
        # Never leased yet in progress: written by a process without leases (an older
        # version); only once it has been quiet for a whole lease period.
        orphan = sa.and_(c.lease_owner.is_(None), c.updated_at < time.time() - self.ttl)
        query = (
            sa.select(c.id)
            .where(c.status == "in_progress", sa.or_(lapsed, orphan))
            .order_by(c.updated_at)
            .limit(limit)
        )
        async with self._store.engine.connect() as conn:
            return [row.id for row in await conn.execute(query)]

    # --- Doorbells ----------------------------------------------------------------------

    async def ring_work(self) -> None:
        await self._store.ring_work()

    def listen(self, work: Callable[[], None], cancel: CancelBell) -> None:
        self._store.bells.set(work, cancel)

    # --- helpers ------------------------------------------------------------------------

    async def _take(
        self, where: sa.ColumnElement[bool], now: sa.ColumnElement[float]
    ) -> list[Claim]:
        stmt = (
            sa.update(t)
            .where(where)
            .values(lease_owner=self.owner, lease_expires_at=now + self.ttl)
            .returning(c.id, c.cancel_reason)
        )
        async with self._store._begin_write() as conn:
            rows = (await conn.execute(stmt)).all()
        return [Claim(row.id, _reason(row.cancel_reason)) for row in rows]

    def _citus(self) -> bool:
        return self._store.citus

    def _now(self) -> sa.ColumnElement[float]:
        """Now, in unix seconds: the database's clock on PostgreSQL, ours on SQLite (one
        machine). On Citus the statement's start, which the coordinator evaluates (it
        refuses a volatile function in a distributed update)."""
        if self._pg and self._citus():
            return _CITUS_NOW
        if self._pg:
            return _PG_NOW
        return sa.literal(time.time(), sa.Double)


def _chunks(ids: list[str], size: int) -> list[list[str]]:
    return [ids[i : i + size] for i in range(0, len(ids), size)]
