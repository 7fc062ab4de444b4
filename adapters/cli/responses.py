"""`resplog responses list` and `resplog responses show`: the read model, filtered and
paginated, and one response as its log tells it (object, moments, durations, usage)."""

from __future__ import annotations

import click
from rich.table import Table

from adapters.cli.common import database_option, main, replica_option
from adapters.cli.output import print_columns, print_json, stdout_console
from adapters.cli.params import Moment, json_option, response_id
from adapters.cli.store import opened, run
from domain.objects import FunctionCall, OutputMessage, ReasoningItem, ResponseObject
from service.audit import responses as uc
from service.audit.conversation import usage_line
from service.audit.records import listing
from service.audit.timeline import Replay, clip, durations, iso
from service.ports import ResponsePage, ResponseRow

STATUSES = ["queued", "in_progress", "completed", "failed", "cancelled", "incomplete"]


@main.group()
def responses() -> None:
    """List and show responses (the read model and each response's log)."""


def _flags(row: ResponseRow) -> str:
    flags = [
        ("background", row.background),
        ("store=false", not row.store),
        ("cancel-requested", row.cancel_requested),
        ("deleted", row.deleted),
    ]
    return " ".join(name for name, on in flags if on)


@responses.command("list")
@database_option
@click.option("--status", multiple=True, type=click.Choice(STATUSES), help="Repeatable.")
@click.option("--owner", default=None, help="Only this owner's (the tenant of an API key).")
@click.option("--model", default=None)
@click.option("--since", type=Moment, default=None, help="Created at or after.")
@click.option("--until", type=Moment, default=None, help="Created before.")
@click.option(
    "--conversation",
    "root",
    default=None,
    metavar="ID",
    help="Only this response and those that continue it (previous_response_id).",
)
@click.option(
    "--deleted/--no-deleted", default=True, show_default=True, help="Include deleted ones."
)
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--after", default=None, metavar="ID", help="The last id of the previous page.")
@replica_option
@json_option
def list_responses(
    database_url: str,
    status: tuple[str, ...],
    owner: str | None,
    model: str | None,
    since: float | None,
    until: float | None,
    root: str | None,
    deleted: bool,
    limit: int,
    after: str | None,
    replica_database_url: str | None,
    as_json: bool,
) -> None:
    """Responses newest first, filtered, a page at a time."""
    for given in (root, after):
        if given is not None:
            response_id(given)

    async def work() -> ResponsePage:
        async with opened(database_url, replica_url=replica_database_url) as audit:
            return await uc.list_responses(
                audit,
                owner=owner,
                status=list(status) or None,
                model=model,
                since=since,
                until=until,
                include_deleted=deleted,
                root=root,
                after=after,
                limit=limit,
            )

    page = run(work())
    if as_json:
        print_json(listing(page))
        return
    print_columns(
        ["ID", "CREATED", "STATUS", "MODEL", "OWNER", "FLAGS", "PREVIOUS"],
        [
            [
                row.id,
                iso(row.created_at),
                row.status,
                row.model,
                row.owner,
                _flags(row),
                row.previous_response_id or "",
            ]
            for row in page.rows
        ],
    )
    if page.has_more:
        click.echo(f"more: --after {page.rows[-1].id}", err=True)


# --- show -------------------------------------------------------------------------------------


def _output_lines(response: ResponseObject) -> list[str]:
    lines = []
    for i, item in enumerate(response.output):
        if isinstance(item, FunctionCall):
            lines.append(
                f"[{i}] function_call {item.status}: {item.name} {item.call_id}: "
                f"{clip(item.arguments)}"
            )
        elif isinstance(item, OutputMessage):
            text = "".join(
                getattr(p, "text", "") or getattr(p, "refusal", "") for p in item.content
            )
            lines.append(f"[{i}] message {item.status}: {clip(text, 100)}")
        elif isinstance(item, ReasoningItem):
            text = "".join(p.text for p in item.content)
            lines.append(f"[{i}] reasoning {item.status}: {clip(text, 100)}")
    return lines


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def _show_text(record: ResponseRow | None, folded: Replay) -> None:
    r = folded.response
    m = folded.moments
    d = durations(m)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows: list[tuple[str, str]] = [
        ("id", r.id),
        ("status", r.status),
        ("model", r.model),
        ("owner", folded.request.owner if folded.request else "-"),
        ("background / store", f"{r.background} / {r.store}"),
        ("previous", r.previous_response_id or "-"),
        ("events", str(folded.events)),
        ("created", iso(m.created)),
        ("queued", iso(m.queued)),
        ("started", iso(m.started)),
        ("first output", iso(m.first_output)),
        ("ended", iso(m.ended)),
        ("queue wait", _seconds(d.queue_wait)),
        ("time to first token", _seconds(d.time_to_first_token)),
        ("generation", _seconds(d.generation)),
        ("total", _seconds(d.total)),
        ("usage", usage_line(r.usage)),
    ]
    if r.error is not None:
        rows.append(("error", f"{r.error.code}: {r.error.message}"))
    if folded.end is not None:
        rows.append(
            (
                "end reason",
                folded.end.reason + (f" ({folded.end.detail})" if folded.end.detail else ""),
            )
        )
    if record is not None:
        rows += [
            (
                "cancel requested",
                iso(record.cancel_requested_at)
                + (f" ({record.cancel_reason})" if record.cancel_reason else ""),
            ),
            ("deleted", iso(record.deleted_at)),
            (
                "lease",
                f"{record.lease_owner} until {iso(record.lease_expires_at)}"
                if record.lease_owner
                else "-",
            ),
        ]
    for key, value in rows:
        grid.add_row(key, value)
    console = stdout_console()
    console.print(grid)
    for line in _output_lines(r):
        console.print(line, markup=False, highlight=False)


@responses.command("show")
@database_option
@click.argument("rid", metavar="ID")
@json_option
def show(database_url: str, rid: str, as_json: bool) -> None:
    """One response from its log: the projected object, lifecycle times, durations, usage."""
    response_id(rid)

    async def work() -> tuple[ResponseRow | None, Replay]:
        async with opened(database_url) as audit:
            return await uc.show_response(audit, rid)

    record, folded = run(work())
    if not as_json:
        _show_text(record, folded)
        return
    print_json(
        {
            "id": rid,
            "owner": folded.request.owner if folded.request else None,
            "events": folded.events,
            "moments": folded.moments,
            "durations": durations(folded.moments),
            "usage": folded.usage,
            "end": folded.end,
            "row": None
            if record is None
            else {
                "status": record.status,
                "version": record.version,
                "updated_at": record.updated_at,
                "cancel_requested_at": record.cancel_requested_at,
                "cancel_reason": record.cancel_reason,
                "deleted_at": record.deleted_at,
                "lease_owner": record.lease_owner,
                "lease_expires_at": record.lease_expires_at,
            },
            "response": folded.response,
        }
    )
