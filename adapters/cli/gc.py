"""`resplog gc`: delete ended responses that were not stored or are past the retention age
(and, if asked, those deleted through the API), events and row together, in batches; on
PostgreSQL a whole day past the retention goes at once, its events' partition dropped."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click
import msgspec

from adapters.cli.common import database_option, main
from adapters.cli.output import Bar, counted, print_columns, print_json
from adapters.cli.params import Duration, json_option, progress_option
from adapters.cli.store import opened, run
from service.audit.timeline import iso

if TYPE_CHECKING:  # the store is imported by the command that runs
    from adapters.store import gc as store_gc
    from adapters.store.partitions import Day
    from adapters.store.sql import SqlEventStore


@main.command()
@database_option
@click.option(
    "--older-than",
    envvar="RESPLOG_RETENTION",
    type=Duration,
    default=None,
    help="Also delete ended responses created longer ago than this (e.g. 30d); "
    "default: no age limit.",
)
@click.option(
    "--deleted",
    is_flag=True,
    help="Also delete responses and conversations deleted through the API.",
)
@click.option("--dry-run", is_flag=True, help="List what would be deleted; delete nothing.")
@click.option(
    "--batch-size",
    type=click.IntRange(1, 10000),
    default=500,
    show_default=True,
    help="Responses per transaction.",
)
@progress_option
@json_option
def gc(
    database_url: str,
    older_than: float | None,
    deleted: bool,
    dry_run: bool,
    batch_size: int,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Delete ended `store: false` responses and those past the retention; never one that
    is still running."""
    from adapters.store import gc as store_gc

    cutoff = None if older_than is None else time.time() - older_than
    rule = store_gc.Rule(unstored=True, cutoff=cutoff, deleted=deleted)
    if dry_run:
        _dry_run(database_url, rule, batch_size, as_json)
        return

    async def work() -> tuple[int, int, int, int, int, int]:
        responses = events = batches = chats = days = 0
        async with opened(database_url) as store:
            with Bar("collecting", None, progress) as bar:
                if cutoff is not None:  # whole days first: a partition dropped (PostgreSQL)
                    days, responses, events = await _drop_days(store, cutoff, bar)
                aged = await _by_day(store, rule)
                async for page in store_gc.candidates(store, aged, batch_size):
                    gone, rows = await store_gc.collect(store, aged, [c.id for c in page])
                    responses, events, batches = responses + gone, events + rows, batches + 1
                    for _ in range(gone):
                        bar.stream()
                    bar.event(rows)
                for found in await store_gc.deleted_conversations(store) if deleted else []:
                    rows = await store_gc.collect_conversation(store, found.id)
                    chats, events = chats + (rows > 0), events + rows
                    bar.stream()
                    bar.event(rows)
                bar.done()
            swept = await store_gc.sweep_blobs(store, time.time())  # after what referred to them
        return responses, events, batches, chats, swept, days

    responses, events, batches, chats, swept, days = run(work())
    if as_json:
        print_json(
            {
                "deleted": responses,
                "events": events,
                "batches": batches,
                "days": days,
                "conversations": chats,
                "blobs": swept,
            }
        )
    else:
        click.echo(
            f"deleted {counted(responses, 'response')} and "
            f"{counted(chats, 'conversation')} ({counted(events, 'event')}) in "
            f"{counted(days, 'whole day')} and {counted(batches, 'batch', 'batches')}; "
            f"{counted(swept, 'unreferenced blob')}"
        )


async def _drop_days(store: SqlEventStore, cutoff: float, bar: Bar) -> tuple[int, int, int]:
    """Drop each day wholly past `cutoff` whose responses have all ended: (days,
    responses, events) gone."""
    from adapters.store import gc as store_gc

    dropped = []
    for day in await store_gc.expired_days(store, cutoff):
        gone = await store_gc.drop_day(store, day.day)
        if gone is not None:
            dropped.append(gone)
            bar.event(gone.events)
    return len(dropped), sum(d.responses for d in dropped), sum(d.events for d in dropped)


async def _by_day(store: SqlEventStore, rule: store_gc.Rule) -> store_gc.Rule:
    """`rule`, with the days that go whole (a partition of their own) kept from its age
    limit: their responses go with their day, never one by one."""
    from adapters.store import gc as store_gc

    if rule.cutoff is None:
        return rule
    return msgspec.structs.replace(rule, days=await store_gc.partitioned_days(store))


def _dry_run(database_url: str, rule: store_gc.Rule, page: int, as_json: bool) -> None:
    from adapters.store import gc as store_gc

    async def work() -> tuple[
        list[Day], list[store_gc.Candidate], list[store_gc.ConversationCandidate]
    ]:
        found: list[store_gc.Candidate] = []
        async with opened(database_url) as store:
            days = [] if rule.cutoff is None else await store_gc.expired_days(store, rule.cutoff)
            async for batch in store_gc.candidates(store, await _by_day(store, rule), page):
                found += batch
            chats = await store_gc.deleted_conversations(store) if rule.deleted else []
        return days, found, chats

    days, found, chats = run(work())
    going = [d for d in days if not d.running]
    events = sum(d.events for d in going)
    events += sum(c.events for c in found) + sum(c.events for c in chats)
    if as_json:
        print_json(
            {
                "dry_run": True,
                "days": days,
                "responses": found,
                "conversations": chats,
                "events": events,
            }
        )
        return
    print_columns(
        ["ID", "CREATED", "STATUS", "EVENTS", "WHY"],
        [
            *([*_day_row(d), str(d.events), _day_why(d)] for d in days),
            *([c.id, iso(c.created_at), c.status, str(c.events), c.why] for c in found),
            *([c.id, iso(c.deleted_at), "deleted", str(c.events), "deleted"] for c in chats),
        ],
    )
    whole = sum(d.responses for d in going)
    click.echo(
        f"would delete {counted(len(found) + whole, 'response')} and "
        f"{counted(len(chats), 'conversation')} ({counted(events, 'event')}), "
        f"{counted(len(going), 'whole day')} of them"
    )


def _day_row(day: Day) -> list[str]:
    """A whole day's line: its partition, when it began, how many responses."""
    from adapters.store.partitions import PERIOD

    return [f"events_p{day.day}", iso(day.day * PERIOD), counted(day.responses, "response")]


def _day_why(day: Day) -> str:
    if day.running:
        return f"kept: {counted(day.running, 'response')} still running"
    return "its whole day is older than the retention"
