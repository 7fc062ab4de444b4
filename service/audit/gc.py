"""The `gc` use-cases: what a rule would delete (a dry run), and deleting it: whole days
first where the log is partitioned, then ended responses in batches, then the
conversations deleted through the API, then the blobs nothing refers to any more."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from service.audit.progress import Opener, Progress
from service.ports import Candidate, Day, DeletedConversation, GcRule

if TYPE_CHECKING:  # the bundle (and the runner it holds) is not imported by `--help`
    from service.bundle import Audit


class Collected(msgspec.Struct, frozen=True, kw_only=True):
    responses: int
    events: int
    batches: int
    conversations: int
    blobs: int
    days: int


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """What would go: the expired days (a day with responses still running stays whole),
    the responses one by one, the deleted conversations."""

    days: list[Day]
    responses: list[Candidate]
    conversations: list[DeletedConversation]


async def _by_day(audit: Audit, rule: GcRule) -> GcRule:
    """`rule`, with the days that go whole (a partition of their own) kept from its age
    limit: their responses go with their day, never one by one."""
    if rule.cutoff is None:
        return rule
    return msgspec.structs.replace(rule, days=await audit.collector.partitioned_days())


async def plan(audit: Audit, rule: GcRule, page: int) -> Plan:
    """What `collect` would delete now; nothing is deleted."""
    days = [] if rule.cutoff is None else await audit.collector.expired_days(rule.cutoff)
    found: list[Candidate] = []
    async for batch in audit.collector.candidates(await _by_day(audit, rule), page):
        found += batch
    chats = await audit.leftovers.deleted_conversations() if rule.deleted else []
    return Plan(days=days, responses=found, conversations=chats)


async def _drop_days(audit: Audit, cutoff: float, bar: Progress) -> tuple[int, int, int]:
    """Drop each day wholly past `cutoff` whose responses have all ended: (days,
    responses, events) gone."""
    dropped = []
    for day in await audit.collector.expired_days(cutoff):
        gone = await audit.collector.drop_day(day.day)
        if gone is not None:
            dropped.append(gone)
            bar.event(gone.events)
    return len(dropped), sum(d.responses for d in dropped), sum(d.events for d in dropped)


async def collect(
    audit: Audit,
    rule: GcRule,
    batch_size: int,
    progress: Opener,
    clock: Callable[[], float] = time.time,
) -> Collected:
    """Delete what `rule` selects, `batch_size` responses a transaction; never a response
    that is still running."""
    responses = events = batches = chats = days = 0
    with progress(None) as bar:
        if rule.cutoff is not None:  # whole days first: a partition dropped (PostgreSQL)
            days, responses, events = await _drop_days(audit, rule.cutoff, bar)
        aged = await _by_day(audit, rule)
        async for page in audit.collector.candidates(aged, batch_size):
            gone, rows = await audit.collector.collect(aged, [c.id for c in page])
            responses, events, batches = responses + gone, events + rows, batches + 1
            for _ in range(gone):
                bar.stream()
            bar.event(rows)
        for found in await audit.leftovers.deleted_conversations() if rule.deleted else []:
            rows = await audit.leftovers.collect_conversation(found.id)
            chats, events = chats + (rows > 0), events + rows
            bar.stream()
            bar.event(rows)
        bar.done()
    swept = await audit.leftovers.sweep_blobs(clock())  # after what referred to them
    return Collected(
        responses=responses,
        events=events,
        batches=batches,
        conversations=chats,
        blobs=swept,
        days=days,
    )
