"""`resplog prompts add|list|show`: prompt templates (a create's `prompt`), straight in the
database, through the use-cases of `service/audit/prompts.py`. Neither openai-python nor
openai-node has an API for them (OpenAI's are made in its dashboard), so these commands
are how a template is made; docs/api.md says how a request uses one."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import click

from adapters.cli.common import database_option, main
from adapters.cli.output import print_columns, print_json
from adapters.cli.store import opened, run
from domain.errors import ResplogError
from domain.templates import PromptTemplate
from service.audit import prompts as uc
from service.ports import PromptSummary, PromptVersion
from service.wire.limits import Limits
from service.wire.templates import read_template

# The owner of every request when `serve` runs without keys (`--auth none`).
ANONYMOUS = "anonymous"


@main.group()
def prompts() -> None:
    """Prompt templates: versioned instructions and messages a request names by `prompt`."""


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _template(instructions: str | None, file: Path | None) -> PromptTemplate:
    if (instructions is None) == (file is None):
        raise click.UsageError("give one of --instructions TEXT or --file PROMPT.json")
    if file is None:
        return read_template({"instructions": instructions}, Limits())
    try:
        raw = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise ResplogError(f"cannot read {file}: {exc}") from None
    return read_template(raw, Limits())


@prompts.command("add")
@database_option
@click.option(
    "--instructions", default=None, help="The template's instructions ({{name}} marks a variable)."
)
@click.option(
    "--file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help='A JSON template: {"instructions": "…", "input": [messages]}.',
)
@click.option(
    "--id",
    "prompt_id",
    default=None,
    help="Add a version to this template (pmpt_…), or create it with this id.",
)
@click.option(
    "--owner",
    default=ANONYMOUS,
    show_default=True,
    help="The owner (tenant) whose requests may use it.",
)
def add(
    database_url: str,
    instructions: str | None,
    file: Path | None,
    prompt_id: str | None,
    owner: str,
) -> None:
    """Add a template, or a new version of --id; prints its id and version."""
    template = _template(instructions, file)

    async def work() -> uc.Added:
        async with opened(database_url) as audit:
            return await uc.add_prompt(audit, template, owner, time.time(), prompt_id)

    added = run(work())
    click.echo(f"{added.id} version {added.version}")


def _row(p: PromptSummary) -> list[str]:
    return [p.id, p.owner, str(p.version), _when(p.created_at), _when(p.updated_at)]


@prompts.command("list")
@database_option
@click.option("--owner", default=None, help="Only this owner's.")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="JSON.")
def list_prompts(database_url: str, owner: str | None, limit: int, as_json: bool) -> None:
    """Templates, the latest changed first: id, owner, latest version, created, updated."""

    async def work() -> list[PromptSummary]:
        async with opened(database_url) as audit:
            return await uc.list_prompts(audit, owner, limit)

    found = run(work())
    if as_json:
        print_json(found)
        return
    print_columns(["ID", "OWNER", "VERSION", "CREATED", "UPDATED"], list(map(_row, found)))


@prompts.command("show")
@database_option
@click.argument("prompt_id", metavar="ID")
@click.option(
    "--version",
    "version",
    type=click.IntRange(1),
    default=None,
    help="This version (default: the latest).",
)
@click.option("--owner", default=None, help="Only if this owner's.")
def show(database_url: str, prompt_id: str, version: int | None, owner: str | None) -> None:
    """One version of a template, as JSON: id, owner, version, created_at, template."""

    async def work() -> PromptVersion:
        async with opened(database_url) as audit:
            return await uc.show_prompt(audit, prompt_id, version, owner)

    print_json(run(work()))
