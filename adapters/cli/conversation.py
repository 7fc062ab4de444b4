"""`resplog conversation ID`: the whole conversation that leads to a response, rebuilt from
the log alone by walking `previous_response_id` back to its root."""

from __future__ import annotations

from typing import Any

import click

from adapters.cli.common import database_option, main
from adapters.cli.output import print_json
from adapters.cli.params import response_id
from adapters.cli.store import opened, replay, run
from domain.errors import NotFound
from domain.objects import InputItem
from service.audit.conversation import (
    ConversationView,
    TurnView,
    added_turn,
    conversation,
    to_markdown,
    to_text,
    turn_view,
)
from service.audit.reading import response_turns
from service.wire.decode import check_conversation_id


async def _conversation_turns(store: Any, cid: str) -> list[TurnView]:
    """A conversation's turns in its order: each response that added items (folded from its
    own log), and the items added through the API, a turn per run of them."""
    from adapters.store.conversations import SqlConversations, audited_items
    from adapters.store.scan import LogScan

    row = await SqlConversations(store).get(cid)
    if row is None:
        raise NotFound(f"conversation {cid} not found")
    scan, turns = LogScan(store), []
    added: list[tuple[InputItem, bool]] = []
    for entry in await audited_items(store, cid):
        if entry.response_id is None:
            added.append((entry.item, entry.deleted))
            continue
        if added:
            turns.append(added_turn(added, row.owner, int(row.created_at)))
            added = []
        if turns and turns[-1].response_id == entry.response_id:
            continue
        _, folded = await replay(scan, entry.response_id)
        if folded.request is not None:
            turns.append(turn_view(folded.request, folded.response, folded.end))
    if added:
        turns.append(added_turn(added, row.owner, int(row.created_at)))
    return turns


@main.command("conversation")
@database_option
@click.argument("rid", metavar="ID")
@click.option("--text", "fmt", flag_value="text", default=True, help="Plain text (default).")
@click.option("--json", "fmt", flag_value="json", help="JSON.")
@click.option("--markdown", "fmt", flag_value="markdown", help="Markdown.")
def show_conversation(database_url: str, rid: str, fmt: str) -> None:
    """Every turn that leads to ID (a response, `resp_…`), or every turn of a conversation
    (`conv_…`): instructions, inputs, reasoning, output, function calls and their outputs,
    usage per turn and in total."""
    if rid.startswith("conv_"):
        check_conversation_id(rid)
    else:
        response_id(rid)

    async def work() -> ConversationView:
        from adapters.store.scan import LogScan

        async with opened(database_url) as store:
            if rid.startswith("conv_"):
                return conversation(rid, await _conversation_turns(store, rid), None)
            turns, missing = await response_turns(LogScan(store), rid)
        return conversation(rid, turns, missing)

    view = run(work())
    if fmt == "json":
        print_json(view)
    elif fmt == "markdown":
        click.echo(to_markdown(view), nl=False)
    else:
        click.echo(to_text(view), nl=False)
