"""`resplog conversation ID`: the whole conversation that leads to a response, rebuilt from
the log alone by walking `previous_response_id` back to its root."""

from __future__ import annotations

import click

from adapters.cli.common import database_option, main
from adapters.cli.output import print_json
from adapters.cli.params import response_id
from adapters.cli.store import opened, run
from service.audit.conversation import ConversationView, to_markdown, to_text
from service.audit.conversations import turns_of
from service.wire.ids import check_conversation_id


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
        async with opened(database_url) as audit:
            return await turns_of(audit, rid)

    view = run(work())
    if fmt == "json":
        print_json(view)
    elif fmt == "markdown":
        click.echo(to_markdown(view), nl=False)
    else:
        click.echo(to_text(view), nl=False)
