"""`resplog keys create|list|revoke`: the API keys, straight in the database, through the
use-cases of `service/access/keys.py` over the key store `adapters/cli/store.py` opens."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click

from adapters.cli.common import database_option, main
from adapters.cli.output import print_columns
from adapters.cli.store import opened, run
from service.access import keys as uc
from service.ports import ApiKey, ApiKeyStore

T = TypeVar("T")


def _run(database_url: str, work: Callable[[ApiKeyStore], Awaitable[T]]) -> T:
    async def go() -> T:
        async with opened(database_url) as audit:
            return await work(audit.keys)

    return run(go())


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@main.group()
def keys() -> None:
    """Manage API keys: each belongs to an owner, and `serve --auth keys` accepts it."""


@keys.command()
@database_option
@click.option("--owner", required=True, help="The owner (tenant) the key acts for.")
@click.option("--name", default=None, help="A label for the key (e.g. where it is used).")
def create(database_url: str, owner: str, name: str | None) -> None:
    """Create a key; its secret is printed once, as the last line, and never stored."""
    new = _run(database_url, lambda store: uc.create_key(store, owner, name, now=time.time()))
    click.echo(f"created API key {new.key.id} for owner {new.key.owner}")
    click.echo("the key is shown only now; keep it secret:")
    click.echo(new.secret)


def _row(key: ApiKey) -> list[str]:
    status = "active" if key.revoked_at is None else f"revoked {_when(key.revoked_at)}"
    return [key.id, key.owner, key.name or "-", key.prefix + "…", _when(key.created_at), status]


@keys.command("list")
@database_option
@click.option("--owner", default=None, help="Only this owner's keys.")
@click.option("--json", "as_json", is_flag=True, help="One JSON array (never the secrets).")
def list_keys(database_url: str, owner: str | None, as_json: bool) -> None:
    """List the keys, oldest first: id, owner, name, prefix, created, status."""
    found = _run(database_url, lambda store: uc.list_keys(store, owner))
    if as_json:
        click.echo(json.dumps([_builtins(k) for k in found], indent=2))
        return
    print_columns(["ID", "OWNER", "NAME", "PREFIX", "CREATED", "STATUS"], list(map(_row, found)))


def _builtins(key: ApiKey) -> dict[str, object]:
    return {
        "id": key.id,
        "owner": key.owner,
        "name": key.name,
        "prefix": key.prefix,
        "created_at": key.created_at,
        "revoked_at": key.revoked_at,
    }


@keys.command()
@database_option
@click.argument("key_id")
def revoke(database_url: str, key_id: str) -> None:
    """Revoke a key for good (servers stop accepting it within their --key-cache-s)."""
    key = _run(database_url, lambda store: uc.revoke_key(store, key_id, now=time.time()))
    click.echo(f"revoked API key {key.id} of owner {key.owner}")
