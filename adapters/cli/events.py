"""`resplog events ID`: a response's event timeline from the log, `--follow` to tail it live,
`--raw` for the exact stored JSON."""

from __future__ import annotations

import click
import msgspec

from adapters.cli.common import database_option, main
from adapters.cli.params import json_option, response_id
from adapters.cli.store import opened, run
from domain.errors import CorruptEvent
from service.audit.events import timeline
from service.audit.timeline import iso, summary
from service.ports import StoredEvent


class _Line(msgspec.Struct, frozen=True, kw_only=True):
    """One event as `--json` prints it: the wire event and the hidden facts, verbatim."""

    position: int
    recorded_at: float
    type: str
    summary: str
    event: msgspec.Raw
    facts: msgspec.Raw | None


def _summary(stored: StoredEvent) -> str:
    try:
        return summary(stored.event())
    except CorruptEvent as exc:
        return f"(corrupt: {exc.reason})"


class _Printer:
    def __init__(self, raw: bool, as_json: bool) -> None:
        self.raw = raw
        self.as_json = as_json
        self.start: float | None = None

    def __call__(self, stored: StoredEvent) -> None:
        if self.raw:
            click.echo(stored.data)
        elif self.as_json:
            click.echo(msgspec.json.encode(self._line(stored)))
        else:
            click.echo(self._text(stored))

    def _line(self, stored: StoredEvent) -> _Line:
        return _Line(
            position=stored.position,
            recorded_at=stored.recorded_at,
            type=stored.type,
            summary=_summary(stored),
            event=msgspec.Raw(stored.data),
            facts=None if stored.facts is None else msgspec.Raw(stored.facts),
        )

    def _text(self, stored: StoredEvent) -> str:
        if self.start is None:
            self.start = stored.recorded_at
        offset = stored.recorded_at - self.start
        return (
            f"{stored.position:>6}  {iso(stored.recorded_at)}  +{offset:9.3f}s  "
            f"{stored.type:<42} {_summary(stored)}"
        )


@main.command()
@database_option
@click.argument("rid", metavar="ID")
@click.option("--follow", "-f", is_flag=True, help="Keep printing live events until the end.")
@click.option("--raw", is_flag=True, help="The exact stored JSON of each event, one per line.")
@click.option("--after", type=int, default=-1, help="Start after this position.")
@json_option
def events(database_url: str, rid: str, follow: bool, raw: bool, after: int, as_json: bool) -> None:
    """The event timeline of a response: position, time, type and a summary of each."""
    response_id(rid)
    printer = _Printer(raw, as_json)

    async def work() -> None:
        async with opened(database_url, listen=follow) as audit:
            found = await timeline(audit, rid, after=after, follow=follow)
            # Offsets count from the response's first event, whatever --after skips.
            printer.start = found.start
            async for stored in found.events:
                printer(stored)

    run(work())
