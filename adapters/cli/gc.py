"""`resplog gc`: delete ended responses that were not stored or are past the retention age
(and, if asked, those deleted through the API), events and row together, in batches."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from adapters.cli.common import database_option, main
from adapters.cli.output import Bar, counted, print_columns, print_json
from adapters.cli.params import Duration, json_option, progress_option
from adapters.cli.store import opened, run
from service.audit.timeline import iso

if TYPE_CHECKING:  # the store is imported by the command that runs
    from adapters.store import gc as store_gc


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

    async def work() -> tuple[int, int, int, int, int]:
        responses = events = batches = chats = 0
        async with opened(database_url) as store:
            with Bar("collecting", None, progress) as bar:
                async for page in store_gc.candidates(store, rule, batch_size):
                    gone, rows = await store_gc.collect(store, rule, [c.id for c in page])
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
        return responses, events, batches, chats, swept

    responses, events, batches, chats, swept = run(work())
    if as_json:
        print_json(
            {
                "deleted": responses,
                "events": events,
                "batches": batches,
                "conversations": chats,
                "blobs": swept,
            }
        )
    else:
        click.echo(
            f"deleted {counted(responses, 'response')} and "
            f"{counted(chats, 'conversation')} ({counted(events, 'event')}) in "
            f"{counted(batches, 'batch', 'batches')}; {counted(swept, 'unreferenced blob')}"
        )


def _dry_run(database_url: str, rule: store_gc.Rule, page: int, as_json: bool) -> None:
    from adapters.store import gc as store_gc

    async def work() -> tuple[list[store_gc.Candidate], list[store_gc.ConversationCandidate]]:
        found: list[store_gc.Candidate] = []
        async with opened(database_url) as store:
            async for batch in store_gc.candidates(store, rule, page):
                found += batch
            chats = await store_gc.deleted_conversations(store) if rule.deleted else []
        return found, chats

    found, chats = run(work())
    events = sum(c.events for c in found) + sum(c.events for c in chats)
    if as_json:
        print_json({"dry_run": True, "responses": found, "conversations": chats, "events": events})
        return
    print_columns(
        ["ID", "CREATED", "STATUS", "EVENTS", "WHY"],
        [
            *([c.id, iso(c.created_at), c.status, str(c.events), c.why] for c in found),
            *([c.id, iso(c.deleted_at), "deleted", str(c.events), "deleted"] for c in chats),
        ],
    )
    click.echo(
        f"would delete {counted(len(found), 'response')} and "
        f"{counted(len(chats), 'conversation')} ({counted(events, 'event')})"
    )
