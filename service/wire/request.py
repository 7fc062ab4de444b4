"""The body of `POST /v1/responses` as msgspec Structs: what a client may send, and the
schema `/openapi.json` publishes. Validation is msgspec's: no coercion, unknown fields refused.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from domain.objects import ReasoningText, SummaryText


class _Strict(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


# --- tools, tool choice, text format, reasoning ---------------------------------------------


class FunctionToolParam(_Strict, frozen=True, kw_only=True):
    # `type` is a plain field, not a tag: other tool kinds are refused with their own
    # message before decoding (decode._refuse_unsupported).
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolChoiceFunctionParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="function"):
    name: str


class ToolChoiceAllowedParam(
    _Strict, frozen=True, kw_only=True, tag_field="type", tag="allowed_tools"
):
    mode: Literal["auto", "required"]
    tools: list[dict[str, Any]]


ToolChoiceParam = (
    Literal["none", "auto", "required"] | ToolChoiceFunctionParam | ToolChoiceAllowedParam
)


class FormatTextParam(_Strict, frozen=True, kw_only=True, tag_field="type", tag="text"):
    pass


class FormatJsonObjectParam(
    _Strict, frozen=True, kw_only=True, tag_field="type", tag="json_object"
):
    pass


class FormatJsonSchemaParam(
    _Strict, frozen=True, kw_only=True, tag_field="type", tag="json_schema"
):
    name: str
    schema: dict[str, Any]
    description: str | None = None
    strict: bool | None = None


class TextParam(_Strict, frozen=True, kw_only=True):
    format: FormatTextParam | FormatJsonObjectParam | FormatJsonSchemaParam | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningParam(_Strict, frozen=True, kw_only=True):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


# --- content parts --------------------------------------------------------------------------


class _Part(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """A content part. Fields a part does not use are ignored, not refused: a client passing
    back an earlier `output_text` sends its `annotations` and `logprobs` too
    (openai-python `ResponseOutputTextParam`)."""


class InputTextParam(_Part, frozen=True, kw_only=True, tag="input_text"):
    text: str


class ChatTextParam(InputTextParam, frozen=True, kw_only=True, tag="text"):
    """Chat Completions' `{"type": "text"}` part, read as `input_text`."""


class OutputTextParam(_Part, frozen=True, kw_only=True, tag="output_text"):
    text: str


class RefusalParam(_Part, frozen=True, kw_only=True, tag="refusal"):
    refusal: str


ContentPartParam = InputTextParam | ChatTextParam | OutputTextParam | RefusalParam


# --- input items ----------------------------------------------------------------------------

# A client's id for an item it passes back is kept; the server assigns the others.
ItemId = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]


class _Item(_Strict, frozen=True, kw_only=True, tag_field="type"):
    id: ItemId | None = None
    # Passed-back items carry a status (openai-python types it optional); it is accepted
    # as is and not kept: a stored input item is always "completed".
    status: Any = None


class MessageParam(_Item, frozen=True, kw_only=True, tag="message"):
    """A message; its `type` may be omitted (openai-python `EasyInputMessageParam`, where
    `type` is not Required): decode fills the tag in before msgspec reads the union."""

    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[ContentPartParam]
    # An assistant message's phase, kept and echoed by `input_items` (openai-python
    # `EasyInputMessageParam.phase`); null is taken as absent.
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCallParam(_Item, frozen=True, kw_only=True, tag="function_call"):
    call_id: str
    name: str
    arguments: str


class FunctionCallOutputParam(_Item, frozen=True, kw_only=True, tag="function_call_output"):
    call_id: str
    output: str | list[ContentPartParam]  # parts: their text is joined


class ReasoningItemParam(_Item, frozen=True, kw_only=True, tag="reasoning"):
    # openai-python `ResponseReasoningItemParam` requires `summary`; resplog never has.
    summary: list[SummaryText] | None = None
    content: list[ReasoningText] | None = None
    encrypted_content: Any = None  # kept when it is a string, else dropped (as ever)


InputItemParam = MessageParam | FunctionCallParam | FunctionCallOutputParam | ReasoningItemParam


class CreateResponseBody(_Strict, frozen=True, kw_only=True):
    """The body of `POST /v1/responses`. Fields OpenAI has that resplog does not support
    are refused with a 400 naming them, never silently dropped."""

    model: str
    input: str | list[InputItemParam] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[FunctionToolParam] | None = None
    tool_choice: ToolChoiceParam | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = None
    reasoning: ReasoningParam | None = None
    text: TextParam | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    store: bool | None = None
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    background: bool | None = None
    include: list[str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
