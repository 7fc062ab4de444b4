"""The prompt template a request names (`prompt`), read into it before anything else: the
first stage of service/prompts/pipeline.py, so that every later stage, and the request's
facts, see the request as its template made it.

The version used is the one named, else the template's latest; the response echoes it
(`prompt.version`), so its log says which version made it. The template's instructions
come first, then the request's own (if any); its messages come before the request's input,
and are recorded with it, as sent to the model. Another owner's template is the same 400
as an id that never existed.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from domain.errors import InvalidRequest
from domain.objects import InputItem, ItemReference, PromptRef
from domain.templates import render
from service.bundle import Bundle
from service.ports import PromptVersion
from service.wire.create_request import CreateRequest
from service.wire.set_aside import SET_ASIDE

_VERSION = re.compile(r"[1-9][0-9]{0,8}")  # OpenAI's versions: "1", "2", …


async def with_template(svc: Bundle, req: CreateRequest, owner: str) -> CreateRequest:
    """`req` with its template's instructions and messages, and the version it used."""
    ref = req.response.prompt
    if not isinstance(ref, PromptRef):
        return req
    found = await _version(svc, ref, owner)
    rendered = render(found.template, ref.variables or {})
    instructions = "\n\n".join(
        text for text in (rendered.instructions, req.response.instructions) if text
    )
    response = msgspec.structs.replace(
        req.response,
        instructions=instructions or None,
        prompt=msgspec.structs.replace(ref, version=str(found.version)),
    )
    given: list[InputItem | ItemReference] = [*rendered.input, *req.input]
    return msgspec.structs.replace(
        req, response=response, input=given, extra=_shifted(req.extra, len(rendered.input))
    )


def _shifted(extra: dict[str, Any], by: int) -> dict[str, Any]:
    """The facts with each set-aside item's index in the input moved past the template's
    messages, which now come first."""
    aside = extra.get(SET_ASIDE)
    if not aside or not by:
        return extra
    return {**extra, SET_ASIDE: [{**a, "at": a["at"] + by} for a in aside]}


async def _version(svc: Bundle, ref: PromptRef, owner: str) -> PromptVersion:
    row = await svc.prompts.get(ref.id)
    if row is None or row.owner != owner:
        raise InvalidRequest(
            f"Prompt with id '{ref.id}' not found.", param="prompt.id", code="invalid_value"
        )
    named = ref.version
    number = row.version if named is None else int(named) if _VERSION.fullmatch(named) else 0
    found = None if not 0 < number <= row.version else await svc.prompts.version(ref.id, number)
    if found is None:
        raise InvalidRequest(
            f"Prompt with id '{ref.id}' has no version '{ref.version}'.",
            param="prompt.version",
            code="invalid_value",
        )
    return found
