"""The event vocabulary of a response stream: one msgspec tagged union, and its codec.

Every event is stored exactly as a client receives it over SSE (its JSON, with
`sequence_number` equal to its log position), so a replay is the same bytes as the live
stream. Facts that clients must not see (the request's input items and owner, the internal
reason of a failure or cancellation) ride on the same row in a separate `facts` document,
never in the numbered sequence: positions stay dense and the wire bytes stay OpenAI's.
Tags never change; a new field gets a default; a breaking change gets a new tag.
"""

from __future__ import annotations

from typing import Any, Literal, Union

import msgspec

from domain.errors import CorruptEvent
from domain.objects import (
    ContentPart,
    InputItem,
    OutputItem,
    ResponseObject,
    SummaryText,
)


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every stored event; `sequence_number` is its position in the stream."""

    sequence_number: int


# --- domain facts (stored beside the wire event, never sent) --------------------------------


# How reasoning text events are named on the wire: OpenAI's `response.reasoning_text.*`
# (what the official SDKs parse) or the Open Responses schema's `response.reasoning.*`.
ReasoningEvents = Literal["openai", "open_responses"]


class RequestFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What the client sent that the `response` snapshot does not echo, and how the
    response's events are named: chosen once, at creation, so every event of the stream,
    whichever process writes it, and every read of it, render the same way."""

    owner: str
    input: list[InputItem]
    stream: bool = False
    include: list[str] = msgspec.field(default_factory=list)
    # Extra request parameters kept verbatim for audit (e.g. `stream_options`).
    extra: dict[str, Any] = msgspec.field(default_factory=dict)
    reasoning_events: ReasoningEvents = "openai"  # logs written before are OpenAI's


class EndFacts(msgspec.Struct, frozen=True, kw_only=True):
    """Why a response ended the way it did, for operators (may hold internal detail)."""

    reason: str
    detail: str | None = None


# --- lifecycle ------------------------------------------------------------------------------


class ResponseCreated(Event, frozen=True, kw_only=True, tag="response.created", omit_defaults=True):
    response: ResponseObject
    facts: RequestFacts | None = None


class ResponseQueued(Event, frozen=True, kw_only=True, tag="response.queued"):
    response: ResponseObject


class ResponseInProgress(Event, frozen=True, kw_only=True, tag="response.in_progress"):
    response: ResponseObject


class ResponseCompleted(Event, frozen=True, kw_only=True, tag="response.completed"):
    response: ResponseObject


class ResponseFailed(Event, frozen=True, kw_only=True, tag="response.failed", omit_defaults=True):
    response: ResponseObject
    facts: EndFacts | None = None


class ResponseIncomplete(
    Event, frozen=True, kw_only=True, tag="response.incomplete", omit_defaults=True
):
    response: ResponseObject
    facts: EndFacts | None = None


class ResponseCancelled(
    Event, frozen=True, kw_only=True, tag="response.incomplete", omit_defaults=True
):
    """The response was cancelled (its client asked, went away, deleted it; a shutdown).

    OpenAI has no stream event for a cancellation (openai-python `ResponseStreamEvent`
    has none, nor has the Open Responses schema), so it goes on the wire as the ending
    SDKs know for a response cut short: `response.incomplete`, whose response has status
    `cancelled`. The codec reads such a row back as this class, so the cancellation stays
    a fact of the log (with its reason in the facts) and a re-encoding gives the same bytes.
    """

    response: ResponseObject
    facts: EndFacts | None = None


class LegacyResponseCancelled(
    ResponseCancelled, frozen=True, kw_only=True, tag="response.cancelled"
):
    """A cancellation as logs written before stored it: resplog's own `response.cancelled`,
    which no SDK knows. Still read, and served as stored; never written any more."""


# --- output items and content parts ---------------------------------------------------------


class ToolFacts(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What a built-in tool call (`web_search_call`) was asked and answered, which OpenAI's
    item does not show: the model's `arguments` (on its `output_item.added`) and the text
    the tool server gave back to the model (`output`, on its `output_item.done`)."""

    arguments: str | None = None
    output: str | None = None


# `omit_defaults`: without facts an item event is the bytes it always was.
class OutputItemAdded(
    Event, frozen=True, kw_only=True, tag="response.output_item.added", omit_defaults=True
):
    output_index: int
    item: OutputItem
    facts: ToolFacts | None = None


class OutputItemDone(
    Event, frozen=True, kw_only=True, tag="response.output_item.done", omit_defaults=True
):
    output_index: int
    item: OutputItem
    facts: ToolFacts | None = None


class ContentPartAdded(Event, frozen=True, kw_only=True, tag="response.content_part.added"):
    item_id: str
    output_index: int
    content_index: int
    part: ContentPart


class ContentPartDone(Event, frozen=True, kw_only=True, tag="response.content_part.done"):
    item_id: str
    output_index: int
    content_index: int
    part: ContentPart


class OutputTextDelta(Event, frozen=True, kw_only=True, tag="response.output_text.delta"):
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[dict[str, Any]] = msgspec.field(default_factory=list)


class OutputTextDone(Event, frozen=True, kw_only=True, tag="response.output_text.done"):
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[dict[str, Any]] = msgspec.field(default_factory=list)


class OutputRefusalDelta(Event, frozen=True, kw_only=True, tag="response.refusal.delta"):
    item_id: str
    output_index: int
    content_index: int
    delta: str


class OutputRefusalDone(Event, frozen=True, kw_only=True, tag="response.refusal.done"):
    item_id: str
    output_index: int
    content_index: int
    refusal: str


class FunctionCallArgumentsDelta(
    Event, frozen=True, kw_only=True, tag="response.function_call_arguments.delta"
):
    item_id: str
    output_index: int
    delta: str


class FunctionCallArgumentsDone(
    Event, frozen=True, kw_only=True, tag="response.function_call_arguments.done"
):
    item_id: str
    output_index: int
    name: str
    arguments: str


class CustomToolCallInputDelta(
    Event, frozen=True, kw_only=True, tag="response.custom_tool_call_input.delta"
):
    item_id: str
    output_index: int
    delta: str


class CustomToolCallInputDone(
    Event, frozen=True, kw_only=True, tag="response.custom_tool_call_input.done"
):
    item_id: str
    output_index: int
    input: str


# --- MCP tools (openai-python `response_mcp_*_event.py`) -------------------------------------


class McpListToolsInProgress(
    Event, frozen=True, kw_only=True, tag="response.mcp_list_tools.in_progress"
):
    item_id: str
    output_index: int


class McpListToolsCompleted(
    Event, frozen=True, kw_only=True, tag="response.mcp_list_tools.completed"
):
    item_id: str
    output_index: int


class McpListToolsFailed(Event, frozen=True, kw_only=True, tag="response.mcp_list_tools.failed"):
    item_id: str
    output_index: int


class McpCallArgumentsDelta(
    Event, frozen=True, kw_only=True, tag="response.mcp_call_arguments.delta"
):
    item_id: str
    output_index: int
    delta: str


class McpCallArgumentsDone(
    Event, frozen=True, kw_only=True, tag="response.mcp_call_arguments.done"
):
    item_id: str
    output_index: int
    arguments: str


class McpCallInProgress(Event, frozen=True, kw_only=True, tag="response.mcp_call.in_progress"):
    """The call is being executed: appended durably before the MCP server is asked, so a
    process that dies during the call leaves this as the last step of the item."""

    item_id: str
    output_index: int


class McpCallCompleted(Event, frozen=True, kw_only=True, tag="response.mcp_call.completed"):
    item_id: str
    output_index: int


class McpCallFailed(Event, frozen=True, kw_only=True, tag="response.mcp_call.failed"):
    item_id: str
    output_index: int


# --- built-in tools (openai-python `response_web_search_call_*_event.py`,
# `response_code_interpreter_call_*_event.py`; docs/mcp.md "Built-in tools") -------------


class WebSearchCallInProgress(
    Event, frozen=True, kw_only=True, tag="response.web_search_call.in_progress"
):
    item_id: str
    output_index: int


class WebSearchCallSearching(
    Event, frozen=True, kw_only=True, tag="response.web_search_call.searching"
):
    """The call is handed to the tool server: appended before it is (as `mcp_call`'s
    `in_progress`)."""

    item_id: str
    output_index: int


class WebSearchCallCompleted(
    Event, frozen=True, kw_only=True, tag="response.web_search_call.completed"
):
    item_id: str
    output_index: int


class CodeInterpreterCallInProgress(
    Event, frozen=True, kw_only=True, tag="response.code_interpreter_call.in_progress"
):
    item_id: str
    output_index: int


class CodeInterpreterCallCodeDelta(
    Event, frozen=True, kw_only=True, tag="response.code_interpreter_call_code.delta"
):
    item_id: str
    output_index: int
    delta: str


class CodeInterpreterCallCodeDone(
    Event, frozen=True, kw_only=True, tag="response.code_interpreter_call_code.done"
):
    item_id: str
    output_index: int
    code: str


class CodeInterpreterCallInterpreting(
    Event, frozen=True, kw_only=True, tag="response.code_interpreter_call.interpreting"
):
    """The code is handed to the tool server: appended before it is."""

    item_id: str
    output_index: int


class CodeInterpreterCallCompleted(
    Event, frozen=True, kw_only=True, tag="response.code_interpreter_call.completed"
):
    item_id: str
    output_index: int


class ReasoningTextDelta(Event, frozen=True, kw_only=True, tag="response.reasoning_text.delta"):
    item_id: str
    output_index: int
    content_index: int
    delta: str


class ReasoningTextDone(Event, frozen=True, kw_only=True, tag="response.reasoning_text.done"):
    item_id: str
    output_index: int
    content_index: int
    text: str


class SchemaReasoningDelta(
    ReasoningTextDelta, frozen=True, kw_only=True, tag="response.reasoning.delta"
):
    """`ReasoningTextDelta` under the Open Responses schema's name (`reasoning_events`
    `open_responses`); no OpenAI SDK knows it."""


class SchemaReasoningDone(
    ReasoningTextDone, frozen=True, kw_only=True, tag="response.reasoning.done"
):
    """`ReasoningTextDone` under the Open Responses schema's name."""


class ReasoningSummaryPartAdded(
    Event, frozen=True, kw_only=True, tag="response.reasoning_summary_part.added"
):
    item_id: str
    output_index: int
    summary_index: int
    part: SummaryText


class ReasoningSummaryPartDone(
    Event, frozen=True, kw_only=True, tag="response.reasoning_summary_part.done"
):
    item_id: str
    output_index: int
    summary_index: int
    part: SummaryText


class ReasoningSummaryTextDelta(
    Event, frozen=True, kw_only=True, tag="response.reasoning_summary_text.delta"
):
    item_id: str
    output_index: int
    summary_index: int
    delta: str


class ReasoningSummaryTextDone(
    Event, frozen=True, kw_only=True, tag="response.reasoning_summary_text.done"
):
    item_id: str
    output_index: int
    summary_index: int
    text: str


LifecycleEvent = (
    ResponseCreated
    | ResponseQueued
    | ResponseInProgress
    | ResponseCompleted
    | ResponseFailed
    | ResponseIncomplete
    | ResponseCancelled
)
TerminalEvent = ResponseCompleted | ResponseFailed | ResponseIncomplete | ResponseCancelled

AnyEvent = (
    LifecycleEvent
    | LegacyResponseCancelled
    | OutputItemAdded
    | OutputItemDone
    | ContentPartAdded
    | ContentPartDone
    | OutputTextDelta
    | OutputTextDone
    | OutputRefusalDelta
    | OutputRefusalDone
    | FunctionCallArgumentsDelta
    | FunctionCallArgumentsDone
    | CustomToolCallInputDelta
    | CustomToolCallInputDone
    | ReasoningTextDelta
    | ReasoningTextDone
    | SchemaReasoningDelta
    | SchemaReasoningDone
    | ReasoningSummaryPartAdded
    | ReasoningSummaryPartDone
    | ReasoningSummaryTextDelta
    | ReasoningSummaryTextDone
    | McpListToolsInProgress
    | McpListToolsCompleted
    | McpListToolsFailed
    | McpCallArgumentsDelta
    | McpCallArgumentsDone
    | McpCallInProgress
    | McpCallCompleted
    | McpCallFailed
    | WebSearchCallInProgress
    | WebSearchCallSearching
    | WebSearchCallCompleted
    | CodeInterpreterCallInProgress
    | CodeInterpreterCallCodeDelta
    | CodeInterpreterCallCodeDone
    | CodeInterpreterCallInterpreting
    | CodeInterpreterCallCompleted
)

# The classes a stored row decodes into, one per tag. `ResponseCancelled` shares its tag
# with `ResponseIncomplete`, so it is not among them: `decode` tells the two apart.
EVENT_TYPES: tuple[type[Event], ...] = (
    ResponseCreated,
    ResponseQueued,
    ResponseInProgress,
    ResponseCompleted,
    ResponseFailed,
    ResponseIncomplete,
    LegacyResponseCancelled,
    OutputItemAdded,
    OutputItemDone,
    ContentPartAdded,
    ContentPartDone,
    OutputTextDelta,
    OutputTextDone,
    OutputRefusalDelta,
    OutputRefusalDone,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    CustomToolCallInputDelta,
    CustomToolCallInputDone,
    ReasoningTextDelta,
    ReasoningTextDone,
    SchemaReasoningDelta,
    SchemaReasoningDone,
    ReasoningSummaryPartAdded,
    ReasoningSummaryPartDone,
    ReasoningSummaryTextDelta,
    ReasoningSummaryTextDone,
    McpListToolsInProgress,
    McpListToolsCompleted,
    McpListToolsFailed,
    McpCallArgumentsDelta,
    McpCallArgumentsDone,
    McpCallInProgress,
    McpCallCompleted,
    McpCallFailed,
    WebSearchCallInProgress,
    WebSearchCallSearching,
    WebSearchCallCompleted,
    CodeInterpreterCallInProgress,
    CodeInterpreterCallCodeDelta,
    CodeInterpreterCallCodeDone,
    CodeInterpreterCallInterpreting,
    CodeInterpreterCallCompleted,
)


def tag_of(cls: type[Event]) -> str:
    """The class's tag, its events' `type` on the wire. Kept by class: msgspec builds the
    config object that holds it at every access (0.1 µs), and every event logged asks."""
    known = _TAG_OF.get(cls)
    if known is not None:
        return known
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str)
    _TAG_OF[cls] = tag
    return tag


_TAG_OF: dict[type[Event], str] = {}


TAGS: dict[str, type[Event]] = {tag_of(cls): cls for cls in EVENT_TYPES}
# The events that carry the whole response object (the read model's snapshot).
LIFECYCLE_TYPES = (
    ResponseCreated,
    ResponseQueued,
    ResponseInProgress,
    ResponseCompleted,
    ResponseFailed,
    ResponseIncomplete,
    ResponseCancelled,
)
LIFECYCLE_TAGS: frozenset[str] = frozenset(
    tag_of(c) for c in (*LIFECYCLE_TYPES, LegacyResponseCancelled)
)
TERMINAL_TAGS: frozenset[str] = frozenset(
    tag_of(c)
    for c in (ResponseCompleted, ResponseFailed, ResponseIncomplete, LegacyResponseCancelled)
)

# --- codec ----------------------------------------------------------------------------------

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[AnyEvent] = msgspec.json.Decoder(Union[EVENT_TYPES])  # noqa: UP007
_facts_decoders: dict[str, msgspec.json.Decoder[Any]] = {
    tag_of(ResponseCreated): msgspec.json.Decoder(RequestFacts),
    tag_of(ResponseFailed): msgspec.json.Decoder(EndFacts),
    tag_of(ResponseIncomplete): msgspec.json.Decoder(EndFacts),
    tag_of(LegacyResponseCancelled): msgspec.json.Decoder(EndFacts),
    tag_of(OutputItemAdded): msgspec.json.Decoder(ToolFacts),
    tag_of(OutputItemDone): msgspec.json.Decoder(ToolFacts),
}
_FACTS_CARRIERS = (
    ResponseCreated,
    ResponseFailed,
    ResponseIncomplete,
    ResponseCancelled,
    OutputItemAdded,
    OutputItemDone,
)


class Encoded(msgspec.Struct, frozen=True):
    """An event as the log stores it: its tag, the exact wire bytes, the hidden facts."""

    type: str
    data: bytes
    facts: bytes | None


def _carries_facts(cls: type[Event]) -> bool:
    """Whether events of `cls` may carry facts, kept by class: `isinstance` against the
    tuple of carriers costs 0.4 µs for an event that is none of them (a msgspec class is
    slower to test against than a plain one), and most events logged are none of them."""
    known = _CARRIES.get(cls)
    if known is None:
        known = _CARRIES[cls] = issubclass(cls, _FACTS_CARRIERS)
    return known


_CARRIES: dict[type[Event], bool] = {}


def encode(event: AnyEvent) -> Encoded:
    """Encode an event into its wire bytes and (separately) its domain facts."""
    cls = type(event)
    tag = tag_of(cls)
    # `isinstance` again only to tell the type checker what `_carries_facts` found.
    if _carries_facts(cls) and isinstance(event, _FACTS_CARRIERS) and event.facts is not None:
        facts = _encoder.encode(event.facts)
        wire = msgspec.structs.replace(event, facts=None)
        return Encoded(tag, _encoder.encode(wire), facts)
    return Encoded(tag, _encoder.encode(event), None)


def encode_json(value: Any) -> bytes:
    return _encoder.encode(value)


def decode(
    data: bytes | str, facts: bytes | str | None, *, stream_id: str, position: int
) -> AnyEvent:
    """Decode a stored row; a corrupt or unknown row raises `CorruptEvent` naming it."""
    try:
        event = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise CorruptEvent(stream_id, position, str(exc)) from exc
    if type(event) is ResponseIncomplete and event.response.status == "cancelled":
        event = ResponseCancelled(
            sequence_number=event.sequence_number, response=event.response, facts=event.facts
        )
    if event.sequence_number != position:
        raise CorruptEvent(
            stream_id, position, f"sequence_number {event.sequence_number} != position"
        )
    if isinstance(event, _FACTS_CARRIERS) and event.facts is not None:
        # The wire bytes go to clients verbatim; facts there would leak owner and input.
        raise CorruptEvent(stream_id, position, "facts inside the wire bytes")
    if facts is not None:
        tag = tag_of(type(event))
        decoder = _facts_decoders.get(tag)
        if decoder is None:
            raise CorruptEvent(stream_id, position, f"{tag} carries no facts")
        try:
            fact_value = decoder.decode(facts)
        except msgspec.DecodeError as exc:
            raise CorruptEvent(stream_id, position, f"facts: {exc}") from exc
        event = msgspec.structs.replace(event, facts=fact_value)
    return event
