"""`resplog conversations list|show`: conversations (the Conversations API's streams) for an
auditor, from the database: who owns each, how many items, whether deleted; one
conversation's items in order, the deleted ones marked, each with the response that added
it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click
import msgspec

from adapters.cli.common import database_option, main
from adapters.cli.output import print_json
from adapters.cli.store import opened, run
from service.audit import conversations as uc
from service.ports import ConversationSummary
from service.wire.ids import check_conversation_id


@main.group()
def conversations() -> None:
    """Conversations (the Conversations API) in the log."""


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


@conversations.command("list")
@database_option
@click.option("--owner", default=None, help="Only this owner's.")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="JSON.")
def list_conversations(database_url: str, owner: str | None, limit: int, as_json: bool) -> None:
    """Conversations newest first, with their item counts (deleted items not counted)."""

    async def work() -> list[ConversationSummary]:
        async with opened(database_url) as audit:
            return (await uc.list_conversations(audit, owner, limit)).rows

    found = run(work())
    if as_json:
        print_json(found)
        return
    for c in found:
        flag = "  deleted" if c.deleted else ""
        click.echo(f"{c.id}  {c.owner}  {_when(c.created_at)}  {c.items} items{flag}")


@conversations.command("show")
@database_option
@click.argument("cid", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="JSON.")
def show_conversation_items(database_url: str, cid: str, as_json: bool) -> None:
    """One conversation: its metadata and every item in order (deleted ones marked), each
    with the response that added it."""
    check_conversation_id(cid)

    async def work() -> dict[str, Any]:
        async with opened(database_url) as audit:
            row, items = await uc.conversation_items(audit, cid)
        return {
            "id": cid,
            "owner": row.owner,
            "created_at": row.created_at,
            "metadata": row.metadata,
            "deleted": row.deleted_at is not None,
            "items": [msgspec.to_builtins(i) for i in items],
        }

    view = run(work())
    if as_json:
        print_json(view)
        return
    click.echo(f"{cid}  owner {view['owner']}  created {_when(view['created_at'])}")
    for n, entry in enumerate(view["items"]):
        item = entry["item"]
        if item.get("type") == "set_aside":  # an item no engine is shown, as sent
            item = {"id": item.get("id"), **item.get("item", {})}
        who = item.get("role") or item.get("type")
        texts = [p.get("text", "") for p in item.get("content") or [] if isinstance(p, dict)]
        text = " ".join(t for t in texts if t) or item.get("output") or item.get("arguments") or ""
        source = f"  (from {entry['response_id']})" if entry["response_id"] else ""
        mark = "  [deleted]" if entry["deleted"] else ""
        click.echo(f"{n:4d} {item.get('id')} {who}: {str(text)[:80]}{source}{mark}")
