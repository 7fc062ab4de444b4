"""Garbage collection: which ended responses may go, and deleting a batch of them (events and
row) in one transaction. A response that has not ended is never selected, and the delete
re-checks the rule, so a row that changed in between stays. Conversations deleted through
the API go the same way (row, items and events), when asked."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any

import sqlalchemy as sa

from adapters.store import blobs, partitions
from adapters.store.sql import SqlEventStore
from adapters.store.tables import conversation_items as t_items
from adapters.store.tables import conversations as t_conversations
from adapters.store.tables import events as t_events
from adapters.store.tables import responses as t_responses
from adapters.store.transient import guarded, guarded_iter
from domain.objects import TERMINAL_STATUSES
from service.ports import Candidate, Day, DeletedConversation, GcRule


def _reasons(rule: GcRule) -> list[sa.ColumnElement[bool]]:
    """Each reason a response may go, on its own: each matches an index of `responses`
    (`ix_responses_unstored`, `ix_responses_created`, `ix_responses_deleted`), so that
    finding those of one reason does not read the responses of the others."""
    c = t_responses.c
    reasons: list[sa.ColumnElement[bool]] = []
    if rule.unstored:
        reasons.append(c.store.is_(False))
    if rule.cutoff is not None:
        aged = c.created_at < rule.cutoff
        if rule.days:
            aged = sa.and_(aged, sa.func.resplog_period(c.id).not_in(sorted(rule.days)))
        reasons.append(aged)
    if rule.deleted:
        reasons.append(c.deleted_at.is_not(None))
    return reasons


def _where(rule: GcRule) -> sa.ColumnElement[bool]:
    reasons = _reasons(rule)
    return sa.and_(_ENDED, sa.or_(*reasons)) if reasons else sa.false()


def _why(rule: GcRule, store: bool, created_at: float, deleted_at: float | None) -> str:
    if rule.unstored and not store:
        return "store=false"
    if rule.cutoff is not None and created_at < rule.cutoff:
        return "older than the retention"
    return "deleted" if deleted_at is not None else "?"


_ENDED = t_responses.c.status.in_(sorted(TERMINAL_STATUSES))


class SqlGc:
    """The `Collector` and `Leftovers` ports over the functions below."""

    def __init__(self, store: SqlEventStore) -> None:
        self.store = store

    def candidates(self, rule: GcRule, page: int) -> AsyncGenerator[list[Candidate], None]:
        return candidates(self.store, rule, page)

    async def collect(self, rule: GcRule, ids: Sequence[str]) -> tuple[int, int]:
        return await collect(self.store, rule, ids)

    async def partitioned_days(self) -> frozenset[int]:
        return await partitioned_days(self.store)

    async def expired_days(self, cutoff: float) -> list[Day]:
        return await expired_days(self.store, cutoff)

    async def drop_day(self, day: int) -> Day | None:
        return await drop_day(self.store, day)

    async def deleted_conversations(self) -> list[DeletedConversation]:
        return await deleted_conversations(self.store)

    async def collect_conversation(self, conversation_id: str) -> int:
        return await collect_conversation(self.store, conversation_id)

    async def sweep_blobs(self, now: float) -> int:
        return await sweep_blobs(self.store, now)


@guarded_iter
async def candidates(
    store: SqlEventStore, rule: GcRule, page: int
) -> AsyncGenerator[list[Candidate], None]:
    """What `rule` selects, oldest first, a page at a time (nothing is deleted)."""
    key: tuple[float, str] | None = None
    while True:
        query = _page(rule, key, page)
        async with store.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        found = [
            Candidate(
                id=r.id,
                status=r.status,
                created_at=r.created_at,
                events=r.version + 1,
                why=_why(rule, bool(r.store), r.created_at, r.deleted_at),
            )
            for r in rows
        ]
        if found:
            yield found
        if len(found) < page:
            return
        key = (found[-1].created_at, found[-1].id)


def _page(rule: GcRule, key: tuple[float, str] | None, page: int) -> sa.Select[Any]:
    """The next `page` responses `rule` selects after `key`, oldest first: a page of each
    reason (each through its own index), merged. In one statement with `OR`, PostgreSQL
    walked the `created_at` index through every ended response to find the few not stored
    or deleted (docs/performance.md, "100 M events on a partitioned log")."""
    c = t_responses.c
    columns = (c.id, c.status, c.created_at, c.version, c.store, c.deleted_at)
    branches = []
    for reason in _reasons(rule):
        branch = sa.select(*columns).where(_ENDED, reason)
        if key is not None:
            branch = branch.where(sa.tuple_(c.created_at, c.id) > sa.tuple_(*key))
        branches.append(branch.order_by(c.created_at, c.id).limit(page))
    if not branches:
        return sa.select(*columns).where(sa.false())
    if len(branches) == 1:
        return branches[0]
    # UNION, not UNION ALL: a response of two reasons (not stored, and old) is one row.
    merged = sa.union(*(sa.select(b.subquery()) for b in branches)).subquery()
    return sa.select(merged).order_by(merged.c.created_at, merged.c.id).limit(page)


@guarded
async def collect(store: SqlEventStore, rule: GcRule, ids: Sequence[str]) -> tuple[int, int]:
    """Delete these responses (those the rule still selects): rows and events, in one
    transaction. Returns (responses, events) deleted."""
    c = t_responses.c
    async with store._begin_write() as conn:
        gone = (
            (
                await conn.execute(
                    sa.delete(t_responses).where(c.id.in_(list(ids)), _where(rule)).returning(c.id)
                )
            )
            .scalars()
            .all()
        )
        if not gone:
            return 0, 0
        result = await conn.execute(sa.delete(t_events).where(t_events.c.stream_id.in_(list(gone))))
        await store.chains_broken(conn)  # a chain that holds one (retention) ends before it
    return len(gone), int(result.rowcount)


# --- whole days (PostgreSQL) ---------------------------------------------------------------


@guarded
async def partitioned_days(store: SqlEventStore) -> frozenset[int]:
    """The days whose events have a partition of their own (none on SQLite)."""
    async with store.engine.connect() as conn:
        return frozenset(await partitions.days(conn))


@guarded
async def expired_days(store: SqlEventStore, cutoff: float) -> list[Day]:
    """The days whose partition ends before `cutoff`, oldest first, with their responses."""
    async with store.engine.connect() as conn:
        return await partitions.expired(conn, cutoff)


@guarded
async def drop_day(store: SqlEventStore, day: int) -> Day | None:
    """Delete the day's responses and drop its events' partition; None if one of its
    responses is still running (the day stays whole)."""
    async with store.engine.connect() as conn:
        # Citus caches no chain (readmodel.py): no count is kept there.
        return await partitions.drop(conn, day, breaks=not store.citus)


# --- conversations ------------------------------------------------------------------------------


@guarded
async def deleted_conversations(store: SqlEventStore) -> list[DeletedConversation]:
    """Conversations deleted through the API (their log was kept for audit until now).
    A conversation is never collected otherwise: it has no end and no retention (OpenAI
    keeps conversations until they are deleted)."""
    c = t_conversations.c
    query = (
        sa.select(c.id, c.deleted_at, c.version)
        .where(c.deleted_at.is_not(None))
        .order_by(c.deleted_at, c.id)
    )
    async with store.engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return [
        DeletedConversation(id=r.id, deleted_at=r.deleted_at, events=r.version + 1) for r in rows
    ]


@guarded
async def collect_conversation(store: SqlEventStore, conversation_id: str) -> int:
    """Delete a deleted conversation's row, items and events in one transaction; the
    events deleted (0 if it is not deleted, or gone)."""
    c = t_conversations.c
    async with store._begin_write() as conn:
        gone = await conn.execute(
            sa.delete(t_conversations).where(c.id == conversation_id, c.deleted_at.is_not(None))
        )
        if gone.rowcount != 1:
            return 0
        await conn.execute(sa.delete(t_items).where(t_items.c.conversation_id == conversation_id))
        result = await conn.execute(
            sa.delete(t_events).where(t_events.c.stream_id == conversation_id)
        )
    return int(result.rowcount)


# How long a blob no event refers to is kept after a request last stored it: more than any
# create takes between storing it and committing, and more than the clocks of two hosts
# differ by (`used_at` is the creating process's clock).
BLOB_GRACE = 300.0


@guarded
async def sweep_blobs(store: SqlEventStore, now: float) -> int:
    """Delete the blobs (`adapters/store/blobs.py`) that no remaining event refers to."""
    async with store._begin_write() as conn:
        return await blobs.sweep(conn, now - BLOB_GRACE)
