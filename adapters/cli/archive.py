"""`resplog export` and `resplog import`: the log of ended responses as JSON Lines (format in
`service/audit/archive.py`), streamed in constant memory, and back into a database
(the use-cases of `service/audit/export.py` and `service/audit/importing.py`).

A response that is still running is skipped, with a note on stderr: its log is not final, and
an imported copy would be a running response nobody generates. Export it once it has ended.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click

from adapters.cli.common import database_option, main, replica_option
from adapters.cli.output import Bar, counted
from adapters.cli.params import Moment, progress_option
from adapters.cli.store import opened, run
from service.audit.export import Exported, Filters, export_log
from service.audit.importing import import_log


@main.command()
@database_option
@click.option("--since", type=Moment, default=None, help="Created at or after.")
@click.option("--until", type=Moment, default=None, help="Created before.")
@click.option("--owner", default=None, help="Only this owner's responses.")
@replica_option
@progress_option
def export(
    database_url: str,
    since: float | None,
    until: float | None,
    owner: str | None,
    replica_database_url: str | None,
    progress: bool | None,
) -> None:
    """Write every event of the selected ended responses to stdout as JSON Lines."""
    out = sys.stdout.buffer

    async def work() -> Exported:
        async with opened(database_url, replica_url=replica_database_url) as audit:
            done = await export_log(
                audit,
                Filters(since=since, until=until, owner=owner),
                out.write,
                lambda total: Bar("exporting", total, progress),
            )
            out.flush()
            return done

    done = run(work())
    click.echo(
        f"exported {counted(done.responses, 'response')}, "
        f"{counted(done.conversations, 'conversation')}, {counted(done.events, 'event')}",
        err=True,
    )
    if done.skipped:
        click.echo(
            f"note: skipped {counted(done.skipped, 'response')} still running; export them "
            "once they end",
            err=True,
        )


def _lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        yield from f


@main.command("import")
@database_option
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--batch-events",
    type=click.IntRange(1),
    default=5000,
    show_default=True,
    help="Events per transaction (a response is never split).",
)
@progress_option
def import_file(database_url: str, file: Path, batch_events: int, progress: bool | None) -> None:
    """Load an export file into a (migrated) database that holds none of its responses
    and conversations."""

    async def work() -> tuple[list[str], int]:
        async with opened(database_url) as audit:
            return await import_log(
                audit,
                lambda: _lines(file),
                batch_events,
                lambda total: Bar("importing", total, progress),
            )

    ids, events = run(work())
    chats = sum(1 for i in ids if i.startswith("conv_"))
    click.echo(
        f"imported {counted(len(ids) - chats, 'response')}, "
        f"{counted(chats, 'conversation')}, {counted(events, 'event')}"
    )
