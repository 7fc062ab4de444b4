"""Builders for the domain tests: a response, its request facts, and a stream driven by the
aggregate's own commands, plus checks against the official `openai` SDK models."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec
import pydantic
from openai.types.responses import Response, ResponseStreamEvent

from domain import builtins, mcp
from domain.builder.emit import emit
from domain.builder.finish import finish
from domain.commands import cancel, create, fail, start
from domain.events import AnyEvent, ReasoningEvents, RequestFacts, decode, encode, tag_of
from domain.generation import (
    AnyDelta,
    ArgumentsDelta,
    BrowserCall,
    EndItem,
    Finished,
    FinishReason,
    FunctionCallStart,
    InputDelta,
    ReasoningDelta,
    RefusalDelta,
    SummaryDelta,
    TextDelta,
    TokenUsage,
)
from domain.objects import (
    FunctionTool,
    InputMessage,
    InputText,
    ResponseObject,
)
from domain.state import Decision, ResponseState

RESPONSE_ID = "resp_abc123"
SUFFIX = "abc123"
NOW = 1_700_000_100

_stream_event = pydantic.TypeAdapter(ResponseStreamEvent)


def make_response(*, background: bool = False, **changes: Any) -> ResponseObject:
    """A freshly accepted response, as the service would hand it to `create`."""
    base = ResponseObject(
        id=RESPONSE_ID,
        created_at=1_700_000_000,
        status="queued" if background else "in_progress",
        background=background,
        model="gpt-oss-20b",
        instructions="Be brief.",
        tools=[
            msgspec.to_builtins(
                FunctionTool(
                    name="get_weather",
                    description="Weather for a city",
                    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
                )
            )
        ],
        max_output_tokens=256,
        metadata={"k": "v"},
    )
    return msgspec.structs.replace(base, **changes)


def make_facts(
    owner: str = "owner-1",
    text: str = "What is the weather in Paris?",
    reasoning_events: ReasoningEvents = "openai",
) -> RequestFacts:
    return RequestFacts(
        owner=owner,
        input=[InputMessage(id="msg_in_0", role="user", content=[InputText(text=text)])],
        reasoning_events=reasoning_events,
    )


def tags(events: list[AnyEvent]) -> list[str]:
    return [tag_of(type(e)) for e in events]


class Stream:
    """One response's log, appended to by the aggregate's commands (as the service does)."""

    def __init__(self, decision: Decision) -> None:
        self.events: list[AnyEvent] = list(decision.events)
        self.state: ResponseState = decision.state

    @classmethod
    def new(
        cls,
        *,
        background: bool = False,
        reasoning_events: ReasoningEvents = "openai",
        **changes: Any,
    ) -> Stream:
        facts = make_facts(reasoning_events=reasoning_events)
        return cls(create(make_response(background=background, **changes), facts))

    def _apply(self, decision: Decision) -> list[AnyEvent]:
        self.events.extend(decision.events)
        self.state = decision.state
        return list(decision.events)

    def start(self) -> list[AnyEvent]:
        return self._apply(start(self.state))

    def emit(self, *deltas: AnyDelta) -> list[AnyEvent]:
        out: list[AnyEvent] = []
        for delta in deltas:
            out += self._apply(emit(self.state, delta))
        return out

    def finish(
        self, reason: FinishReason = "stop", usage: TokenUsage | None = None
    ) -> list[AnyEvent]:
        usage = usage or TokenUsage(input_tokens=10, output_tokens=5)
        return self._apply(finish(self.state, Finished(reason=reason, usage=usage), now=NOW))

    def fail(self, **kw: Any) -> list[AnyEvent]:
        args: dict[str, Any] = {"code": "server_error", "message": "engine went away"}
        args.update(kw)
        args.setdefault("reason", "engine_error")
        return self._apply(fail(self.state, **args))

    def cancel(self, reason: str = "user", usage: TokenUsage | None = None) -> list[AnyEvent]:
        return self._apply(cancel(self.state, reason=reason, usage=usage))


# --- a catalogue of scenarios, together reaching every event tag and every status ----------

RICH_DELTAS: tuple[AnyDelta, ...] = (
    ReasoningDelta(text="The user "),
    ReasoningDelta(text="wants weather."),
    SummaryDelta(text="Looking up "),
    SummaryDelta(text="the weather."),
    TextDelta(text="Let me check.", phase="commentary"),
    FunctionCallStart(name="get_weather", call_id="call_engine_1"),
    ArgumentsDelta(text='{"city": '),
    ArgumentsDelta(text='"Paris"}'),
    EndItem(),
    TextDelta(text="It is ", phase="final_answer"),
    TextDelta(text="sunny.", phase="final_answer"),
    RefusalDelta(text="I won't say more."),
)


def _rich_completed() -> Stream:
    s = Stream.new()
    s.emit(*RICH_DELTAS)
    s.finish(
        usage=TokenUsage(input_tokens=40, cached_tokens=8, output_tokens=30, reasoning_tokens=12)
    )
    return s


def _custom_tool_called() -> Stream:
    """A namespaced function call, then a custom tool's call with free-form input."""
    s = Stream.new()
    s.emit(
        FunctionCallStart(name="lookup", namespace="crm"),
        ArgumentsDelta(text='{"id": 7}'),
        EndItem(),
        FunctionCallStart(name="apply_patch", custom=True),
        InputDelta(text="*** Begin Patch\n"),
        InputDelta(text="*** End Patch"),
        EndItem(),
    )
    s.finish()
    return s


def _background_completed() -> Stream:
    s = Stream.new(background=True)
    s.start()
    s.emit(TextDelta(text="Hi"), EndItem(), TextDelta(text="again"))
    s.finish()
    return s


def _incomplete_length() -> Stream:
    s = Stream.new()
    s.emit(TextDelta(text="One."), EndItem(), TextDelta(text="Two, and th"))
    s.finish("length")
    return s


def _incomplete_content_filter() -> Stream:
    s = Stream.new()
    s.emit(ReasoningDelta(text="hmm"))
    s.finish("content_filter")
    return s


def _failed_from_queued() -> Stream:
    s = Stream.new(background=True)
    s.fail(reason="worker_lost", detail="lease expired on host-7")
    return s


def _failed_mid_call() -> Stream:
    s = Stream.new()
    s.emit(FunctionCallStart(name="get_weather"), ArgumentsDelta(text='{"ci'))
    s.fail(detail="sglang: connection reset", usage=TokenUsage(input_tokens=3, output_tokens=2))
    return s


def _cancelled_from_queued() -> Stream:
    s = Stream.new(background=True)
    s.cancel()
    return s


def _cancelled_mid_summary() -> Stream:
    s = Stream.new(background=True)
    s.start()
    s.emit(ReasoningDelta(text="a"), SummaryDelta(text="b"))
    s.cancel(reason="client_disconnected")
    return s


def _schema_named_reasoning() -> Stream:
    """A response created to name reasoning events as the Open Responses schema does."""
    s = Stream.new(reasoning_events="open_responses")
    s.emit(ReasoningDelta(text="Think"), ReasoningDelta(text="ing."), EndItem())
    s.emit(TextDelta(text="Done."))
    s.finish()
    return s


def _queued() -> Stream:
    return Stream.new(background=True)


def _streaming() -> Stream:
    s = Stream.new()
    s.emit(TextDelta(text="partial"))
    return s


def _mcp_loop() -> Stream:
    """A tool loop (domain/mcp.py): a listing, a call that completes, one that fails, an
    answer; the steps the runner records between the engine's generations."""
    s = Stream.new()
    s._apply(mcp.list_started(s.state, "tools"))
    s._apply(mcp.list_ended(s.state, [{"name": "echo", "input_schema": {}}], None))
    s.emit(
        FunctionCallStart(name="echo", server_label="tools"),
        ArgumentsDelta(text='{"text": "hi"}'),
        EndItem(),
    )
    s._apply(mcp.call_started(s.state))
    s._apply(mcp.call_ended(s.state, output="echo: hi"))
    s.emit(FunctionCallStart(name="echo", server_label="tools"), ArgumentsDelta(text="{}"))
    s.emit(EndItem())
    s._apply(mcp.call_started(s.state))
    s._apply(mcp.call_ended(s.state, error=mcp.execution_error("boom")))
    s.emit(TextDelta(text="Done."))
    s.finish()
    return s


def _mcp_list_failed_then_taken_over() -> Stream:
    """A failed listing, then a call in flight when its process died: taken over."""
    s = Stream.new()
    s._apply(mcp.list_started(s.state, "tools"))
    s._apply(mcp.list_ended(s.state, None, "unreachable"))
    s.emit(FunctionCallStart(name="slow", server_label="tools"), ArgumentsDelta(text="{}"))
    s.emit(EndItem())
    s._apply(mcp.call_started(s.state))
    s._apply(mcp.interrupted(s.state))
    s.cancel()
    return s


def _builtin_loop() -> Stream:
    """gpt-oss's built-ins (domain/builtins.py): a search that completes, python code that
    completes, a page that fails to open, python cut off by the response's end."""
    s = Stream.new()
    s.emit(BrowserCall(name="search", arguments='{"query": "resplog"}'))
    s._apply(builtins.builtin_started(s.state))
    s._apply(builtins.builtin_ended(s.state, output="【0†resplog】", error=None))
    s.emit(FunctionCallStart(name="python", builtin="python"), ArgumentsDelta(text="print(1)"))
    s.emit(EndItem())
    s._apply(builtins.builtin_started(s.state))
    s._apply(builtins.builtin_ended(s.state, output="1\n", error=None))
    s.emit(BrowserCall(name="open", arguments='{"id": "https://example.test/x"}'))
    s._apply(builtins.builtin_ended(s.state, output=None, error="no such page"))
    s.emit(FunctionCallStart(name="python", builtin="python"), ArgumentsDelta(text="1/0"))
    s.finish()
    return s


def _builtin_retried_then_lost() -> Stream:
    """An idempotent built-in call in flight at a takeover is retried once; a call still in
    flight after the retry is failed at the next takeover."""
    s = Stream.new()
    s.emit(FunctionCallStart(name="python", builtin="python"), ArgumentsDelta(text="x"))
    s.emit(EndItem())
    s._apply(builtins.builtin_started(s.state))
    s._apply(mcp.interrupted(s.state, frozenset({"tool_server:python"})))
    s._apply(mcp.interrupted(s.state, frozenset({"tool_server:python"})))
    s.emit(TextDelta(text="Gone."))
    s.finish()
    return s


SCENARIOS: dict[str, Callable[[], Stream]] = {
    "builtin_loop": _builtin_loop,
    "builtin_retried_then_lost": _builtin_retried_then_lost,
    "mcp_loop": _mcp_loop,
    "mcp_list_failed_then_taken_over": _mcp_list_failed_then_taken_over,
    "rich_completed": _rich_completed,
    "custom_tool_called": _custom_tool_called,
    "background_completed": _background_completed,
    "incomplete_length": _incomplete_length,
    "incomplete_content_filter": _incomplete_content_filter,
    "failed_from_queued": _failed_from_queued,
    "failed_mid_call": _failed_mid_call,
    "cancelled_from_queued": _cancelled_from_queued,
    "cancelled_mid_summary": _cancelled_mid_summary,
    "schema_named_reasoning": _schema_named_reasoning,
    "queued": _queued,
    "streaming": _streaming,
}


def all_scenario_events() -> list[tuple[str, AnyEvent]]:
    return [(name, e) for name, make in SCENARIOS.items() for e in make().events]


# --- checks -------------------------------------------------------------------------------


def roundtrip(event: AnyEvent, stream_id: str = RESPONSE_ID) -> AnyEvent:
    enc = encode(event)
    return decode(enc.data, enc.facts, stream_id=stream_id, position=event.sequence_number)


def sdk_response(obj: ResponseObject) -> Response:
    """Validate a projection with the official SDK model; it must read back every field."""
    data = msgspec.to_builtins(obj)
    model = Response.model_validate(data)
    assert model.model_dump(mode="json", exclude_unset=True, by_alias=True) == data
    return model


def sdk_stream_event(data: bytes) -> pydantic.BaseModel:
    """Validate wire bytes with the SDK's event union; it must read back every field."""
    model: pydantic.BaseModel = _stream_event.validate_json(data)
    assert model.model_dump(mode="json", exclude_unset=True, by_alias=True) == json.loads(data)
    return model
