"""A response's history as the log tells it: a one-line summary of each event, and the
lifecycle moments (created, queued, started, first output, ended) with the durations
between them, folded from the stream as its rows arrive."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import msgspec

from domain.events import (
    AnyEvent,
    ContentPartAdded,
    ContentPartDone,
    CustomToolCallInputDelta,
    CustomToolCallInputDone,
    EndFacts,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    McpCallArgumentsDelta,
    McpCallArgumentsDone,
    OutputItemAdded,
    OutputItemDone,
    OutputRefusalDelta,
    OutputRefusalDone,
    OutputTextDelta,
    OutputTextDone,
    ReasoningSummaryPartAdded,
    ReasoningSummaryPartDone,
    ReasoningSummaryTextDelta,
    ReasoningSummaryTextDone,
    ReasoningTextDelta,
    ReasoningTextDone,
    RequestFacts,
    ResponseCancelled,
    ResponseCompleted,
    ResponseCreated,
    ResponseFailed,
    ResponseIncomplete,
    ResponseInProgress,
    ResponseQueued,
)
from domain.fold.replay import evolve, project
from domain.objects import (
    CodeInterpreterCall,
    CustomToolCall,
    FunctionCall,
    McpCall,
    McpListTools,
    OutputItem,
    ResponseObject,
    Usage,
    WebSearchCall,
)
from domain.state import ResponseState
from service.ports import StoredEvent

_FIRST_OUTPUT = (
    OutputTextDelta,
    OutputRefusalDelta,
    ReasoningTextDelta,
    ReasoningSummaryTextDelta,
    FunctionCallArgumentsDelta,
)
_ENDS = (ResponseCompleted, ResponseFailed, ResponseIncomplete, ResponseCancelled)


def clip(text: str, width: int = 60) -> str:
    """A JSON-quoted excerpt (control characters visible), cut to about `width`."""
    quoted = json.dumps(text, ensure_ascii=False)
    return quoted if len(quoted) <= width else quoted[: width - 2] + '…"'


def _kind(value: msgspec.Struct) -> str:
    """The `type` tag of an item or content part."""
    return str(type(value).__struct_config__.tag)


def _item(item: OutputItem) -> str:
    if isinstance(item, McpCall):
        tail = f" -> {clip(item.output)}" if item.output else ""
        err = f" error {clip(str(item.error))}" if item.error else ""
        return f"mcp_call {item.server_label}.{item.name}({clip(item.arguments)}){tail}{err}"
    if isinstance(item, McpListTools):
        names = ", ".join(str(t.get("name")) for t in item.tools)
        return f"mcp_list_tools {item.server_label} [{names}]" + (
            f" error {clip(item.error)}" if item.error else ""
        )
    if isinstance(item, FunctionCall | CustomToolCall):
        ns = f"{item.namespace}." if isinstance(item.namespace, str) else ""
        return f"{_kind(item)} {ns}{item.name} {item.call_id}"
    if isinstance(item, WebSearchCall | CodeInterpreterCall):
        return f"{_kind(item)} {builtin_text(item)} {item.status}"
    return f"{_kind(item)} {item.id}"


def builtin_text(item: WebSearchCall | CodeInterpreterCall) -> str:
    """A built-in call in a line: the browser's action, or the code and what it printed."""
    if isinstance(item, WebSearchCall):
        target = [str(v) for k, v in item.action.items() if k != "type" and v]
        return f"{item.action.get('type')}({clip(' '.join(target))})"
    logs = "".join(str(o.get("logs", "")) for o in item.outputs or [])
    return f"python({clip(item.code or '')})" + (f" -> {clip(logs)}" if logs else "")


def _end(response: ResponseObject, facts: EndFacts | None) -> str:
    parts: list[str] = [response.status]
    if response.error is not None:
        parts.append(f"{response.error.code}: {clip(response.error.message)}")
    if response.incomplete_details is not None:
        parts.append(response.incomplete_details.reason)
    if response.usage is not None:
        u = response.usage
        parts.append(f"usage {u.input_tokens} in / {u.output_tokens} out")
    if facts is not None:
        parts.append(f"reason {facts.reason}")
    return " · ".join(parts)


def _created(facts: RequestFacts | None, r: ResponseObject) -> str:
    who = f"owner {facts.owner} · {len(facts.input)} input item(s)" if facts else "no request"
    return f"{r.status} · model {r.model} · {who}"


def summary(event: AnyEvent) -> str:
    """What one event says, in a line (deltas and texts are quoted and clipped)."""
    match event:
        case ResponseCreated(response=r, facts=facts):
            return _created(facts, r)
        case ResponseQueued() | ResponseInProgress():
            return event.response.status
        case ResponseCompleted(response=r):
            return _end(r, None)
        case (
            ResponseFailed(response=r, facts=f)
            | ResponseIncomplete(response=r, facts=f)
            | ResponseCancelled(response=r, facts=f)
        ):
            return _end(r, f)
        case OutputItemAdded(output_index=i, item=item):
            return f"#{i} {_item(item)}"
        case OutputItemDone(output_index=i, item=item):
            return f"#{i} {_item(item)} {getattr(item, 'status', None) or 'done'}"
        case ContentPartAdded(output_index=i, content_index=c, part=p):
            return f"#{i}.{c} {_kind(p)}"
        case ContentPartDone(output_index=i, content_index=c, part=p):
            return f"#{i}.{c} {_kind(p)} done"
        case OutputTextDelta(delta=d) | ReasoningTextDelta(delta=d) | OutputRefusalDelta(delta=d):
            return clip(d)
        case (
            FunctionCallArgumentsDelta(delta=d)
            | ReasoningSummaryTextDelta(delta=d)
            | CustomToolCallInputDelta(delta=d)
        ):
            return clip(d)
        case CustomToolCallInputDone(input=t):
            return f"{len(t)} chars {clip(t)}"
        case OutputTextDone(text=t) | ReasoningTextDone(text=t) | ReasoningSummaryTextDone(text=t):
            return f"{len(t)} chars {clip(t)}"
        case OutputRefusalDone(refusal=t):
            return f"{len(t)} chars {clip(t)}"
        case FunctionCallArgumentsDone(name=name, arguments=args):
            return f"{name}({clip(args)})"
        case ReasoningSummaryPartAdded(summary_index=s) | ReasoningSummaryPartDone(summary_index=s):
            return f"summary {s}"
        case McpCallArgumentsDelta(delta=d):
            return clip(d)
        case McpCallArgumentsDone(arguments=args):
            return f"({clip(args)})"
    # The MCP loop's steps (`response.mcp_call.in_progress`, ...) say it in their type.
    return f"#{getattr(event, 'output_index', '?')}"


class Moments(msgspec.Struct, frozen=True, kw_only=True):
    """When each lifecycle step was recorded (unix seconds; None: not reached)."""

    created: float | None = None
    queued: float | None = None
    started: float | None = None
    first_output: float | None = None
    ended: float | None = None


class Durations(msgspec.Struct, frozen=True, kw_only=True):
    """Seconds between the moments; None where one end is missing.

    `queue_wait`: created -> started; `time_to_first_token`: created -> the first output
    delta of any kind (what the client waited); `generation`: started -> ended;
    `total`: created -> ended.
    """

    queue_wait: float | None
    time_to_first_token: float | None
    generation: float | None
    total: float | None


def _between(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def durations(m: Moments) -> Durations:
    return Durations(
        queue_wait=_between(m.created, m.started),
        time_to_first_token=_between(m.created, m.first_output),
        generation=_between(m.started, m.ended),
        total=_between(m.created, m.ended),
    )


class Replay:
    """Folds a stream as its rows arrive (strictly: a damaged log raises) and notes the
    moments, the request and how it ended."""

    def __init__(self) -> None:
        self.state = ResponseState()
        self.request: RequestFacts | None = None
        self.end: EndFacts | None = None
        self.events = 0
        self._moments: dict[str, float] = {}

    def feed(self, stored: StoredEvent) -> AnyEvent:
        event = stored.event()
        self.state = evolve(self.state, event)
        self.events += 1
        self._observe(event, stored.recorded_at)
        return event

    def _observe(self, event: AnyEvent, at: float) -> None:
        step = {
            ResponseCreated: "created",
            ResponseQueued: "queued",
            ResponseInProgress: "started",
        }.get(type(event))
        if isinstance(event, _FIRST_OUTPUT):
            step = "first_output"
        elif isinstance(event, _ENDS):
            step = "ended"
            self.end = event.facts if not isinstance(event, ResponseCompleted) else None
        if isinstance(event, ResponseCreated):
            self.request = event.facts
        if step is not None:
            self._moments.setdefault(step, at)

    @property
    def moments(self) -> Moments:
        return Moments(**self._moments)

    @property
    def response(self) -> ResponseObject:
        return project(self.state)

    @property
    def usage(self) -> Usage | None:
        return self.state.response.usage if self.state.response else None


def iso(t: float | None) -> str:
    """A unix time as ISO 8601 UTC with milliseconds, e.g. 2025-01-31T12:00:00.123Z."""
    if t is None:
        return "-"
    stamp = datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")
