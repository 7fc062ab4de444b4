"""A prompt template as an operator writes it (`resplog prompts add --file PROMPT.json`, or
`--instructions TEXT`): `{"instructions": "…", "input": "…" | [messages]}`, read into the
domain's `PromptTemplate` with the checks a create's instructions and input get."""

from __future__ import annotations

from typing import Any

import msgspec

from domain.errors import InvalidRequest
from domain.objects import InputMessage
from domain.templates import PromptTemplate
from service.wire.items import read_input
from service.wire.limits import Limits, check_text
from service.wire.rejection import rejection
from service.wire.request import InputItemParam, MessageParam
from service.wire.tags import tag_easy_messages


class TemplateParam(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    instructions: str | None = None
    input: str | list[MessageParam] | None = None


def read_template(raw: Any, limits: Limits) -> PromptTemplate:
    """`raw` (decoded JSON) as a template: instructions, messages, or both; nothing else.
    Its messages' ids are left for the responses that use it to give."""
    if not isinstance(raw, dict):
        raise InvalidRequest("A prompt template must be a JSON object.", code="invalid_json")
    raw = tag_easy_messages(raw)
    try:
        parsed = msgspec.convert(raw, TemplateParam)
    except msgspec.ValidationError as exc:
        raise rejection(exc, raw) from exc
    check_text("instructions", parsed.instructions, limits)
    given: str | list[InputItemParam] | None = (
        parsed.input if not isinstance(parsed.input, list) else list(parsed.input)
    )
    messages = read_input(given, limits)
    if any(m.id for m in messages if isinstance(m, InputMessage)):
        raise InvalidRequest(
            "Invalid 'input': a template's messages have no ids (each response that uses "
            "it gives them theirs).",
            param="input",
            code="invalid_value",
        )
    if not parsed.instructions and not messages:
        raise InvalidRequest(
            "A prompt template needs 'instructions' or 'input'.",
            param="instructions",
            code="missing_required_parameter",
        )
    return PromptTemplate(
        instructions=parsed.instructions,
        input=[m for m in messages if isinstance(m, InputMessage)],
    )
