"""Prompt templates for an operator (`resplog prompts add|list|show`): a template added or
given its next version, listed, or one version shown; each template is its owner's, as a
response is (a request of another owner's names an unknown template)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from domain.errors import InvalidRequest, NotFound
from domain.templates import PromptTemplate
from service.ids import new_id
from service.ports import PromptSummary, PromptVersion
from service.wire.ids import check_prompt_id

if TYPE_CHECKING:  # the bundle (and the runner it holds) is not imported by `--help`
    from service.bundle import Audit


class Added(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    version: int


async def add_prompt(
    audit: Audit, template: PromptTemplate, owner: str, now: float, prompt_id: str | None = None
) -> Added:
    """A new template (an id of the server's unless `prompt_id`), or the next version of
    `prompt_id` when it exists; another owner's id is refused, nothing written."""
    if not owner:
        raise InvalidRequest("the owner must not be empty", param="owner")
    pid = new_id("pmpt", now) if prompt_id is None else check_prompt_id(prompt_id, param="id")
    version = await audit.prompts.add(pid, owner, template, now)
    if version is None:
        raise InvalidRequest(f"prompt {pid} belongs to another owner", param="id")
    return Added(id=pid, version=version)


async def list_prompts(audit: Audit, owner: str | None, limit: int) -> list[PromptSummary]:
    return await audit.prompts.summaries(owner, limit)


async def show_prompt(
    audit: Audit, prompt_id: str, version: int | None = None, owner: str | None = None
) -> PromptVersion:
    """One version (the latest if none) of a template (only if `owner`'s, when given)."""
    row = await audit.prompts.get(check_prompt_id(prompt_id, param="id"))
    if row is None or (owner is not None and row.owner != owner):
        raise NotFound(f"no prompt {prompt_id}")
    found = await audit.prompts.version(prompt_id, row.version if version is None else version)
    if found is None:
        raise NotFound(f"prompt {prompt_id} has no version {version} (its latest is {row.version})")
    return found
