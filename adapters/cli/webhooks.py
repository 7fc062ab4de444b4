"""`resplog webhooks add|list|disable|enable|rotate-secret|remove|deliveries`: an owner's
webhook endpoints and their deliveries, straight in the database, through the use-cases of
service/webhooks/manage.py over the store `adapters/cli/store.py` opens.

A signing secret is sealed under the servers' `--reasoning-key` (RESPLOG_REASONING_KEY), the
key that seals the headers of `mcp` tools, so `add` and `rotate-secret` need that key: a
secret sealed under another would not open in the servers that sign with it.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
import msgspec

from adapters.cli.common import database_option, main
from adapters.cli.output import print_columns
from adapters.cli.store import opened, run
from adapters.sealing import AesGcmSealer
from domain.errors import ResplogError
from service.access.admission import ANONYMOUS
from service.webhooks import manage as uc
from service.webhooks.model import EVENT_TYPES, Endpoint, WebhookStore

T = TypeVar("T")


def _run(database_url: str, work: Callable[[WebhookStore], Awaitable[T]]) -> T:
    async def go() -> T:
        async with opened(database_url) as audit:
            assert audit.webhooks is not None
            return await work(audit.webhooks)

    return run(go())


def _sealer(key: str | None) -> AesGcmSealer:
    if not key:
        raise ResplogError(
            "webhook secrets are sealed under the servers' --reasoning-key: give the same key "
            "(prefer RESPLOG_REASONING_KEY)"
        )
    try:
        return AesGcmSealer.from_setting(key)[0]
    except ValueError:  # never echo the value: it is a secret
        raise click.BadParameter(
            "expected base64 keys of 32 bytes, comma-separated", param_hint="--reasoning-key"
        ) from None


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_key_option = click.option(
    "--reasoning-key",
    envvar="RESPLOG_REASONING_KEY",
    default=None,
    help="The servers' --reasoning-key, which seals the signing secret (prefer the "
    "environment variable: a flag shows in the process list).",
)


@main.group()
def webhooks() -> None:
    """Webhook endpoints: OpenAI's response.* events of an owner's background responses,
    signed (Standard Webhooks), delivered at least once (docs/webhooks.md)."""


@webhooks.command()
@database_option
@_key_option
@click.argument("url")
@click.option(
    "--events",
    required=True,
    metavar="TYPE,...",
    help=f"The event types it hears: {', '.join(EVENT_TYPES)}.",
)
@click.option(
    "--owner",
    default=ANONYMOUS,
    show_default=True,
    help="The owner whose responses it hears (an API key's owner; anonymous without auth).",
)
def add(database_url: str, reasoning_key: str | None, url: str, events: str, owner: str) -> None:
    """Add an endpoint; its signing secret (whsec_…) is printed once, as the last line."""
    sealer = _sealer(reasoning_key)
    new = _run(
        database_url,
        lambda store: uc.add_endpoint(
            store, sealer, url, events.split(","), owner, now=time.time()
        ),
    )
    e = new.endpoint
    click.echo(f"added webhook endpoint {e.id} for owner {e.owner}: {e.url} ({','.join(e.events)})")
    click.echo("the signing secret is shown only now; keep it secret:")
    click.echo(new.secret)


def _row(e: Endpoint) -> list[str]:
    status: str = e.status
    if e.status == "disabled" and e.disabled_reason:
        status = f"disabled: {e.disabled_reason}"
    failing = "-" if e.failing_since is None else _when(e.failing_since)
    return [e.id, e.owner, e.url, ",".join(e.events), _when(e.created_at), failing, status]


def _builtins(value: Any) -> Any:
    return msgspec.to_builtins(value)


@webhooks.command("list")
@database_option
@click.option("--owner", default=None, help="Only this owner's endpoints.")
@click.option("--removed", is_flag=True, help="Show removed endpoints too.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON array, each endpoint with its record of changes (never the secrets).",
)
def list_endpoints(database_url: str, owner: str | None, removed: bool, as_json: bool) -> None:
    """List the endpoints, oldest first: id, owner, URL, events, created, failing since,
    status."""
    if as_json:  # each endpoint with its record (added, disabled and why, enabled, ...)
        records = _run(database_url, lambda store: uc.endpoint_records(store, owner, removed))
        click.echo(json.dumps(_builtins(records), indent=2))
        return
    found = _run(database_url, lambda store: uc.list_endpoints(store, owner, removed=removed))
    print_columns(
        ["ID", "OWNER", "URL", "EVENTS", "CREATED", "FAILING SINCE", "STATUS"],
        list(map(_row, found)),
    )


@webhooks.command()
@database_option
@click.argument("endpoint_id")
@click.option("--reason", default="disabled by the operator", show_default=True)
def disable(database_url: str, endpoint_id: str, reason: str) -> None:
    """Stop delivering to an endpoint; its deliveries wait (until they expire)."""
    e = _run(database_url, lambda store: uc.set_status(store, endpoint_id, "disabled", reason))
    click.echo(f"disabled webhook endpoint {e.id}")


@webhooks.command()
@database_option
@click.argument("endpoint_id")
def enable(database_url: str, endpoint_id: str) -> None:
    """Deliver to an endpoint again (one disabled by hand or for failing)."""
    e = _run(database_url, lambda store: uc.set_status(store, endpoint_id, "enabled"))
    click.echo(f"enabled webhook endpoint {e.id}")


@webhooks.command("rotate-secret")
@database_option
@_key_option
@click.argument("endpoint_id")
@click.option(
    "--grace-h",
    default=24.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Hours the old secret also signs (every delivery carries both signatures).",
)
def rotate_secret(
    database_url: str, reasoning_key: str | None, endpoint_id: str, grace_h: float
) -> None:
    """Give an endpoint a new signing secret, printed once as the last line."""
    sealer = _sealer(reasoning_key)
    new = _run(
        database_url,
        lambda store: uc.rotate_secret(
            store, sealer, endpoint_id, grace_s=grace_h * 3600, now=time.time()
        ),
    )
    click.echo(
        f"rotated the secret of webhook endpoint {new.endpoint.id}; the old one also signs "
        f"until {_when(new.endpoint.previous_until)}"
    )
    click.echo("the new signing secret is shown only now; keep it secret:")
    click.echo(new.secret)


@webhooks.command()
@database_option
@click.argument("endpoint_id")
def remove(database_url: str, endpoint_id: str) -> None:
    """Remove an endpoint: nothing more is delivered to it (its record is kept)."""
    e = _run(database_url, lambda store: uc.set_status(store, endpoint_id, "removed"))
    click.echo(f"removed webhook endpoint {e.id}")


@webhooks.command()
@database_option
@click.argument("endpoint_id", required=False)
@click.option("--response", "response_id", default=None, help="Only this response's.")
@click.option("--owner", default=None, help="Only this owner's.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="One JSON array, attempts included.")
def deliveries(
    database_url: str,
    endpoint_id: str | None,
    response_id: str | None,
    owner: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Deliveries, newest first (of one endpoint if ID is given), each with every attempt:
    when, status, latency, error, and the process that made it."""
    found = _run(
        database_url,
        lambda store: uc.delivery_records(
            store, endpoint_id=endpoint_id, response_id=response_id, owner=owner, limit=limit
        ),
    )
    if as_json:
        click.echo(json.dumps(_builtins(found), indent=2))
        return
    rows: list[list[str]] = []
    for r in found:
        d = r.delivery
        head = [r.webhook_id, d.endpoint_id, d.response_id, d.event_type, d.status]
        if not r.attempts:
            rows.append([*head, "-", "-", "-", "-", "-", "-", "-"])
        for n, a in enumerate(r.attempts):
            rows.append(
                [
                    *(head if n == 0 else [""] * len(head)),
                    str(a.number),
                    _when(a.started_at),
                    "-" if a.status_code is None else str(a.status_code),
                    f"{a.latency_s * 1000:.0f}ms",
                    a.outcome,
                    a.worker,
                    a.error or "-",
                ]
            )
    print_columns(
        [
            "WEBHOOK-ID",
            "ENDPOINT",
            "RESPONSE",
            "TYPE",
            "STATUS",
            "ATTEMPT",
            "STARTED",
            "HTTP",
            "LATENCY",
            "OUTCOME",
            "PROCESS",
            "ERROR",
        ],
        rows,
    )
