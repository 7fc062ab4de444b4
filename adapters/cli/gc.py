"""`resplog gc`: delete ended responses that were not stored or are past the retention age
(and, if asked, those deleted through the API), events and row together, in batches; on
PostgreSQL a whole day past the retention goes at once, its events' partition dropped."""

from __future__ import annotations

import time

import click

from adapters.cli.common import database_option, main
from adapters.cli.output import Bar, counted, print_columns, print_json
from adapters.cli.params import Duration, json_option, progress_option
from adapters.cli.store import opened, run
from service.audit import gc as uc
from service.audit.timeline import iso
from service.ports import Day, GcRule


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
    cutoff = None if older_than is None else time.time() - older_than
    rule = GcRule(unstored=True, cutoff=cutoff, deleted=deleted)
    if dry_run:
        _dry_run(database_url, rule, batch_size, as_json)
        return

    async def work() -> uc.Collected:
        async with opened(database_url) as audit:
            return await uc.collect(
                audit, rule, batch_size, lambda total: Bar("collecting", total, progress)
            )

    done = run(work())
    if as_json:
        print_json(
            {
                "deleted": done.responses,
                "events": done.events,
                "batches": done.batches,
                "days": done.days,
                "conversations": done.conversations,
                "blobs": done.blobs,
            }
        )
    else:
        click.echo(
            f"deleted {counted(done.responses, 'response')} and "
            f"{counted(done.conversations, 'conversation')} ({counted(done.events, 'event')}) "
            f"in {counted(done.days, 'whole day')} and "
            f"{counted(done.batches, 'batch', 'batches')}; "
            f"{counted(done.blobs, 'unreferenced blob')}"
        )


def _dry_run(database_url: str, rule: GcRule, page: int, as_json: bool) -> None:
    async def work() -> uc.Plan:
        async with opened(database_url) as audit:
            return await uc.plan(audit, rule, page)

    found = run(work())
    days, chats = found.days, found.conversations
    going = [d for d in days if not d.running]
    events = sum(d.events for d in going)
    events += sum(c.events for c in found.responses) + sum(c.events for c in chats)
    if as_json:
        print_json(
            {
                "dry_run": True,
                "days": days,
                "responses": found.responses,
                "conversations": chats,
                "events": events,
            }
        )
        return
    print_columns(
        ["ID", "CREATED", "STATUS", "EVENTS", "WHY"],
        [
            *([*_day_row(d), str(d.events), _day_why(d)] for d in days),
            *([c.id, iso(c.created_at), c.status, str(c.events), c.why] for c in found.responses),
            *([c.id, iso(c.deleted_at), "deleted", str(c.events), "deleted"] for c in chats),
        ],
    )
    whole = sum(d.responses for d in going)
    click.echo(
        f"would delete {counted(len(found.responses) + whole, 'response')} and "
        f"{counted(len(chats), 'conversation')} ({counted(events, 'event')}), "
        f"{counted(len(going), 'whole day')} of them"
    )


def _day_row(day: Day) -> list[str]:
    """A whole day's line: its partition, when it began, how many responses."""
    return [f"events_p{day.day}", iso(day.start), counted(day.responses, "response")]


def _day_why(day: Day) -> str:
    if day.running:
        return f"kept: {counted(day.running, 'response')} still running"
    return "its whole day is older than the retention"
