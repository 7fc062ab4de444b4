"""Queries and flags on the `responses` read model (the `ResponseIndex` port, plus `list`),
shared by both stores."""

from __future__ import annotations

import builtins
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, TypeVar

import msgspec
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from adapters.store import blobs, partitions
from adapters.store.bells import Bells
from adapters.store.tables import BREAK, row_of
from adapters.store.tables import chain_breaks as t_breaks
from adapters.store.tables import events as t_events
from adapters.store.tables import responses as t_responses
from adapters.store.transient import guarded
from domain.errors import NotFound
from domain.reasons import CancelReason
from service.ports import ChainLink, ChainTip, ResponsePage, ResponseRow

T = TypeVar("T")
_CUSTOM_PLAN = sa.text("SET LOCAL plan_cache_mode = force_custom_plan")
# A visibility check that needs no snapshot (a replay's) reads none: a snapshot may be
# megabytes, and a burst of replays would read it once each (docs/performance.md, "Stalled
# readers").
_WITH_SNAPSHOT = tuple(t_responses.c)
_WITHOUT_SNAPSHOT = tuple(
    sa.literal("").label("snapshot") if c.name == "snapshot" else c for c in t_responses.c
)


class ReadModel:
    """Mixed into the stores, which supply the engine and their write transaction."""

    dialect: ClassVar[str]
    # Whether the log is distributed on Citus: PostgresEventStore finds it out at start.
    citus: bool = False
    engine: AsyncEngine
    statements: AsyncEngine
    bells: Bells

    def _begin_write(self) -> AbstractAsyncContextManager[AsyncConnection]:
        raise NotImplementedError

    async def reading(self, read: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """`read` (a listing, an admin command's read: never part of a write) on a
        connection that sees at least every commit made before it was asked for: the
        database's own here; PostgreSQL's store reads on its replica where it has caught up
        (replica.py `read_caught_up`)."""
        async with self.engine.connect() as conn:
            return await read(conn)

    async def chains_broken(self, conn: AsyncConnection) -> None:
        """Raise the chain-break count in `conn`'s transaction, which removes or hides
        responses: each process's cached chain histories are read again
        (service/prompts/chains.py). Not on Citus, whose processes cache no chain."""
        if not self.citus:
            await conn.execute(BREAK)

    @guarded
    async def get(self, response_id: str) -> ResponseRow | None:
        query = sa.select(t_responses).where(t_responses.c.id == response_id)
        async with self.statements.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else row_of(row)

    @guarded
    async def visible(
        self, response_id: str, owner: str, *, snapshot: bool = True
    ) -> ResponseRow | None:
        """The row if `owner` may see it (theirs, stored, not deleted), else None;
        `snapshot=False`: with an empty snapshot, which is then not read at all.

        The owner and the flags are in the WHERE clause rather than checked on the fetched
        row: a row that is not the caller's then never has its snapshot read or sent, so a
        large one is refused as fast as an id that does not exist (no existence by timing).
        """
        c = t_responses.c
        columns = _WITH_SNAPSHOT if snapshot else _WITHOUT_SNAPSHOT
        query = sa.select(*columns).where(
            c.id == response_id, c.owner == owner, c.store.is_(True), c.deleted_at.is_(None)
        )
        async with self.statements.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else row_of(row)

    @guarded
    async def chain(self, response_id: str, owner: str, limit: int) -> list[ChainLink]:
        """See `service.ports.ResponseIndex.chain`: one recursive query, whatever the length,
        so a continuation costs one round trip instead of two per earlier turn."""
        if self.citus:
            return await self._chain_by_turns(response_id, owner, limit)
        r, e = t_responses.c, t_events.c
        seen = (r.owner == owner, r.store.is_(True), r.deleted_at.is_(None))
        start = sa.select(r.id, r.previous_response_id, sa.literal(0).label("depth")).where(
            r.id == response_id, *seen
        )
        walk = start.cte("chain", recursive=True)
        step = (
            sa.select(r.id, r.previous_response_id, (walk.c.depth + 1).label("depth"))
            .join(walk, r.id == walk.c.previous_response_id)
            .where(walk.c.depth < limit - 1, *seen)
        )
        walk = walk.union_all(step)
        query = (
            sa.select(
                walk.c.id,
                r.status,
                r.previous_response_id,
                r.snapshot,
                e.facts,
                e.content_digest.is_not(None),
            )
            .join(t_responses, r.id == walk.c.id)
            .outerjoin(
                t_events,
                sa.and_(
                    e.stream_id == walk.c.id,
                    e.position == 0,
                    partitions.same_partition(e.stream_id, walk.c.id, self.dialect),
                ),
            )
            .order_by(walk.c.depth)
        )
        async with self.engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                # A prepared statement's generic plan, fixed while chains (and the table)
                # were short, walks a long chain with a scan per step (90 ms at turn 500
                # against 5 ms planned for the actual id): plan this one for its values.
                await conn.execute(_CUSTOM_PLAN)
            rows = (await conn.execute(query)).all()
            found = await blobs.load(conn, {d for row in rows for d in blobs.references(row[4])})
        return [_link(row, found) for row in rows]

    @guarded
    async def chain_tip(self, response_id: str, owner: str) -> ChainTip:
        """See `service.ports.ResponseIndex.chain_tip`: the link of `chain` with a limit of
        one, and the chain-break count, in one statement (no count on Citus, which caches
        no chain: its statements name one shard, the count's row is on none)."""
        if self.citus:
            links = await self._chain_by_turns(response_id, owner, 1)
            return ChainTip(link=links[0] if links else None, breaks=None)
        breaks = sa.select(t_breaks.c.breaks).where(t_breaks.c.id == 1).scalar_subquery()
        query = _one_turn(response_id, owner, self.dialect).add_columns(breaks)
        async with self.statements.connect() as conn:
            row = (await conn.execute(query)).first()
            if row is None:
                return ChainTip(link=None, breaks=None)
            found = await blobs.load(conn, blobs.references(row[4]))
        count = row[6]
        return ChainTip(link=_link(row, found), breaks=None if count is None else int(count))

    async def _chain_by_turns(self, response_id: str, owner: str, limit: int) -> list[ChainLink]:
        """`chain` on Citus, which runs no recursive query over distributed tables: one
        read a turn, each on the turn's shard (its row joined to its first event, which
        are co-located)."""
        links: list[ChainLink] = []
        at: str | None = response_id
        async with self.engine.connect() as conn:
            while at is not None and len(links) < limit:
                row = (await conn.execute(_one_turn(at, owner, self.dialect))).first()
                if row is None:
                    break
                links.append(_link(row, await blobs.load(conn, blobs.references(row[4]))))
                at = links[-1].previous_response_id
        return links

    @guarded
    async def mark_deleted(self, response_id: str) -> bool:
        """Hide the response from the API (its log stays); False if absent or already so."""
        stmt = (
            sa.update(t_responses)
            .where(t_responses.c.id == response_id, t_responses.c.deleted_at.is_(None))
            .values(deleted_at=time.time())
        )
        async with self._begin_write() as conn:
            deleted = (await conn.execute(stmt)).rowcount == 1
            if deleted:
                await self.chains_broken(conn)  # the chains that hold it end before it now
        return deleted

    @guarded
    async def request_cancel(
        self, response_id: str, reason: CancelReason = CancelReason.CANCELLED_BY_USER
    ) -> bool:
        """Flag the response for cancellation with `reason` and ring the cancel doorbell of
        the process that holds its lease; False if there is no such (undeleted) response.

        The first request's time and reason are kept, as the runner keeps the first reason
        it is given: a doorbell and a later renewal pass then agree on why it stopped.
        """
        reason = CancelReason(reason)  # a plain string is checked here, not stored as is
        c = t_responses.c
        first = c.cancel_requested_at.is_(None)
        stmt = (
            sa.update(t_responses)
            .where(c.id == response_id, c.deleted_at.is_(None))
            .values(
                cancel_requested_at=sa.case((first, time.time()), else_=c.cancel_requested_at),
                cancel_reason=sa.case((first, reason.value), else_=c.cancel_reason),
            )
            .returning(c.lease_owner, c.cancel_reason)
        )
        async with self._begin_write() as conn:
            row = (await conn.execute(stmt)).first()
            if row is not None and row.lease_owner is not None:
                flagged = CancelReason(row.cancel_reason)
                await self._ring_cancel(conn, row.lease_owner, flagged, response_id)
        return row is not None

    async def _ring_cancel(
        self, conn: AsyncConnection, owner: str, reason: CancelReason, response_id: str
    ) -> None:
        """Tell the lease owner (the embedded store: only this process can be it)."""
        if owner == self.bells.owner:
            self.bells.cancel([(response_id, reason)])

    @guarded
    async def list(
        self,
        *,
        owner: str | None = None,
        status: str | Sequence[str] | None = None,
        model: str | None = None,
        since: float | None = None,
        until: float | None = None,
        include_deleted: bool = False,
        root: str | None = None,
        end_reason: str | None = None,
        after: str | None = None,
        limit: int = 20,
    ) -> ResponsePage:
        """Responses newest first (`created_at`, then id), filtered; keyset-paginated by
        `after` (the last id of the previous page). `since` is inclusive, `until` exclusive;
        `root` keeps that response and every one that continues it (`previous_response_id`,
        transitively); `end_reason` those that ended for it (`ended_for`)."""
        c = t_responses.c
        query = sa.select(t_responses).order_by(c.created_at.desc(), c.id.desc()).limit(limit + 1)
        conds: builtins.list[sa.ColumnElement[bool]] = []
        if owner is not None:
            conds.append(c.owner == owner)
        if isinstance(status, str):
            conds.append(c.status == status)
        elif status is not None:
            conds.append(c.status.in_(builtins.list(status)))
        if model is not None:
            conds.append(c.model == model)
        if since is not None:
            conds.append(c.created_at >= since)
        if until is not None:
            conds.append(c.created_at < until)
        if not include_deleted:
            conds.append(c.deleted_at.is_(None))
        if root is not None:
            conds.append(c.id.in_(sa.select(_conversation(root).c.id)))
        if end_reason is not None:
            conds.append(ended_for(end_reason, self.dialect))

        async def rows_of(conn: AsyncConnection) -> Sequence[Any]:
            # Built anew each time: a read the replica failed is run again on the primary.
            older = [] if after is None else [await self._older_than(conn, after)]
            return (await conn.execute(query.where(*conds, *older))).all()

        rows = await self.reading(rows_of)
        page = [row_of(r) for r in rows[:limit]]
        return ResponsePage(rows=page, has_more=len(rows) > limit)

    async def _older_than(self, conn: AsyncConnection, after: str) -> sa.ColumnElement[bool]:
        c = t_responses.c
        query = sa.select(c.created_at).where(c.id == after)
        created = (await conn.execute(query)).scalar_one_or_none()
        if created is None:
            raise NotFound(f"no response {after} to list after")
        # A row comparison, which the planner turns into where an index scan of
        # `(created_at, id)` starts; the same as an OR of the two cases, which it can only
        # filter by, walking every newer row first (a page deep in the history of 10 M
        # events took 35 ms that way, 0.2 ms this way: docs/performance.md).
        return sa.tuple_(c.created_at, c.id) < sa.tuple_(created, after)


def _one_turn(response_id: str, owner: str, dialect: str) -> sa.Select[Any]:
    """One response of a chain as `_link` takes it, if `owner` may continue it: its row
    joined to its first event (co-located on Citus), whose facts are its request's."""
    r, e = t_responses.c, t_events.c
    return (
        sa.select(
            r.id,
            r.status,
            r.previous_response_id,
            r.snapshot,
            e.facts,
            e.content_digest.is_not(None),
        )
        .outerjoin(
            t_events,
            sa.and_(
                e.stream_id == r.id,
                e.position == 0,
                partitions.same_partition(e.stream_id, response_id, dialect),
            ),
        )
        .where(r.id == response_id, r.owner == owner, r.store.is_(True), r.deleted_at.is_(None))
    )


def _link(row: Sequence[Any], found: dict[str, str]) -> ChainLink:
    """A chain's turn from its (id, status, previous id, snapshot, first event's facts,
    erased) and the blobs those facts refer to."""
    rid, status, previous, snapshot, facts, erased = row[:6]
    return ChainLink(
        response_id=rid,
        status=status,
        previous_response_id=previous,
        snapshot=snapshot.encode(),
        request_facts=None if facts is None else blobs.put_back(facts, found).encode(),
        erased=bool(erased),
    )


def ended_for(reason: str, dialect: str) -> sa.ColumnElement[bool]:
    """The responses whose terminal event records `reason` (the `reason` of its hidden
    facts: a failure's, a cancellation's, an `incomplete`'s), or, for `completed`, which
    completed (that event records none). The terminal event is a terminal stream's last,
    at `version`: one primary-key probe per row, and no JSON function (both dialects).
    The facts document starts with its reason (`EndFacts` is encoded in field order)."""
    c = t_responses.c
    if reason == "completed":
        return c.status == "completed"
    e = t_events.c
    prefix = msgspec.json.encode({"reason": reason})[:-1].decode()
    return c.status.in_(("failed", "incomplete", "cancelled")) & sa.exists().where(
        e.stream_id == c.id,
        e.position == c.version,
        e.facts.startswith(prefix, autoescape=True),
        partitions.same_partition(e.stream_id, c.id, dialect),
    )


def _conversation(root: str) -> sa.CTE:
    """The ids of `root` and of every response that continues it, followed through the
    `previous_response_id` index."""
    c = t_responses.c
    chain = sa.select(c.id).where(c.id == root).cte("conversation", recursive=True)
    nxt = sa.select(c.id).join(chain, c.previous_response_id == chain.c.id)
    return chain.union(nxt)  # UNION, not UNION ALL: a (damaged) cycle still ends
