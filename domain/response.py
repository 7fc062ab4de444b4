"""The response aggregate: a frozen state, `evolve` (one event), and the pure commands.

Lifecycle (invariant 4): queued -> in_progress -> completed | failed | cancelled | incomplete,
and queued -> cancelled | failed. Terminal states absorb; exactly one terminal event, last.
`evolve` is strict: it refuses any event that could not have been produced by the commands
(a gap in positions, a delta for an item that is not open, a snapshot that differs from the
fold), so replaying a corrupted log fails loudly at the offending position.

Commands are built on `evolve`: each one folds the events it produces as it goes, so every
event it returns is one `evolve` accepts, and it hands back the resulting state as well
(`Decision`) so the writer does not fold twice on the per-token path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

import msgspec

from domain.errors import InvalidTransition, NotFound
from domain.events import (
    AnyEvent,
    ContentPartAdded,
    ContentPartDone,
    EndFacts,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    OutputItemAdded,
    OutputItemDone,
    OutputTextDelta,
    OutputTextDone,
    ReasoningSummaryPartAdded,
    ReasoningSummaryPartDone,
    ReasoningSummaryTextDelta,
    ReasoningSummaryTextDone,
    ReasoningTextDelta,
    ReasoningTextDone,
    RefusalDelta,
    RefusalDone,
    RequestFacts,
    ResponseCancelled,
    ResponseCompleted,
    ResponseCreated,
    ResponseFailed,
    ResponseIncomplete,
    ResponseInProgress,
    ResponseQueued,
    tag_of,
)
from domain.generation import (
    AnyDelta,
    ArgumentsDelta,
    EndItem,
    Finished,
    FunctionCallStart,
    SummaryDelta,
    TextDelta,
    TokenUsage,
)
from domain.generation import (
    ReasoningDelta as ReasoningTextChunk,
)
from domain.generation import (
    RefusalDelta as RefusalChunk,
)
from domain.objects import (
    TERMINAL_STATUSES,
    ContentPart,
    FunctionCall,
    IncompleteDetails,
    InputTokensDetails,
    ItemStatus,
    OutputItem,
    OutputMessage,
    OutputText,
    OutputTokensDetails,
    ReasoningItem,
    ReasoningText,
    Refusal,
    ResponseError,
    ResponseObject,
    SummaryText,
    Usage,
)

replace = msgspec.structs.replace


class ResponseState(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the commands need to know about one response, folded from its log."""

    version: int = -1  # position of the last event; -1 before the first
    response: ResponseObject | None = None  # the projection: the OpenAI object so far
    facts: RequestFacts | None = None
    started: bool = False  # `response.in_progress` seen
    open_index: int | None = None  # the output item being streamed
    open_part: int | None = None  # its open content part
    open_summary: int | None = None  # its open summary part (reasoning items)
    # The open part's final text (or the open call's final arguments) was sent: no more
    # deltas, and the part (or call) must close next.
    closing: bool = False

    @property
    def status(self) -> str | None:
        return None if self.response is None else self.response.status

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class Decision(msgspec.Struct, frozen=True):
    """The events a command produced and the state after them."""

    events: list[AnyEvent]
    state: ResponseState


# --- evolve -----------------------------------------------------------------------------------


def _fail(state: ResponseState, event: AnyEvent, why: str) -> InvalidTransition:
    rid = state.response.id if state.response else "?"
    return InvalidTransition(
        f"{rid}: event {event.sequence_number} ({type(event).__name__}) is illegal: {why}"
    )


def _resp(state: ResponseState, event: AnyEvent) -> ResponseObject:
    if state.response is None:
        raise _fail(state, event, "the stream does not start with response.created")
    if state.response.terminal:
        raise _fail(state, event, f"the response is already {state.response.status}")
    return state.response


def _open_item(state: ResponseState, event: AnyEvent, index: int, item_id: str) -> OutputItem:
    resp = _resp(state, event)
    if state.open_index != index:
        raise _fail(state, event, f"output item {index} is not open")
    item = resp.output[index]
    if item.id != item_id:
        raise _fail(state, event, f"item_id {item_id} is not {item.id}")
    return item


def _set_item(
    state: ResponseState, index: int, item: OutputItem, **changes: object
) -> ResponseState:
    assert state.response is not None
    output = list(state.response.output)
    output[index] = item
    return replace(state, response=replace(state.response, output=output), **changes)


def _parts(item: OutputItem) -> list[ContentPart]:
    """A copy of the item's content parts (messages and reasoning items have them)."""
    if isinstance(item, OutputMessage | ReasoningItem):
        return list(item.content)
    return []


def _with_parts(item: OutputItem, parts: list[ContentPart]) -> OutputItem:
    # `evolve` only ever puts message parts in messages and reasoning text in reasoning
    # items (ContentPartAdded checks it), so the list is already of the right kind.
    return replace(item, content=parts)


def _open_part(
    state: ResponseState, event: AnyEvent, index: int, item_id: str, content_index: int
) -> tuple[OutputItem, ContentPart]:
    item = _open_item(state, event, index, item_id)
    if state.open_part != content_index:
        raise _fail(state, event, f"content part {content_index} is not open")
    content = item.content if isinstance(item, OutputMessage | ReasoningItem) else ()
    return item, content[content_index]


def _append_text(
    state: ResponseState,
    event: AnyEvent,
    index: int,
    item_id: str,
    content_index: int,
    text: str,
    kind: type[OutputText] | type[Refusal] | type[ReasoningText],
) -> ResponseState:
    item, part = _open_part(state, event, index, item_id, content_index)
    if not isinstance(part, kind):
        raise _fail(state, event, f"content part {content_index} is a {type(part).__name__}")
    _not_closing(state, event)
    parts = _parts(item)
    if isinstance(part, Refusal):
        parts[content_index] = replace(part, refusal=part.refusal + text)
    else:
        parts[content_index] = replace(part, text=part.text + text)
    return _set_item(state, index, _with_parts(item, parts), version=event.sequence_number)


def _check_text(
    state: ResponseState,
    event: AnyEvent,
    index: int,
    item_id: str,
    content_index: int,
    text: str,
    kind: type[OutputText] | type[Refusal] | type[ReasoningText],
) -> ResponseState:
    _, part = _open_part(state, event, index, item_id, content_index)
    if not isinstance(part, kind):
        raise _fail(state, event, f"content part {content_index} is a {type(part).__name__}")
    _not_closing(state, event)
    have = part.refusal if isinstance(part, Refusal) else part.text
    if have != text:
        raise _fail(state, event, "the final text differs from its deltas")
    return replace(state, version=event.sequence_number, closing=True)


def _not_closing(state: ResponseState, event: AnyEvent) -> None:
    if state.closing:
        raise _fail(state, event, "the final text was already sent")


def _must_be_closing(state: ResponseState, event: AnyEvent, what: str) -> None:
    if not state.closing:
        raise _fail(state, event, f"the {what} was not sent first")


def _summary(
    state: ResponseState, event: AnyEvent, index: int, item_id: str, summary_index: int
) -> tuple[ReasoningItem, SummaryText]:
    item = _open_item(state, event, index, item_id)
    if not isinstance(item, ReasoningItem) or state.open_summary != summary_index:
        raise _fail(state, event, f"summary part {summary_index} is not open")
    return item, item.summary[summary_index]


def _snapshot_check(
    state: ResponseState, event: AnyEvent, expected: ResponseObject, got: ResponseObject
) -> None:
    if expected != got:
        raise _fail(state, event, "its response snapshot differs from the fold of the log")


def terminal_snapshot(
    current: ResponseObject,
    status: Literal["completed", "failed", "cancelled", "incomplete"],
    *,
    completed_at: int | None,
    usage: Usage | None,
    error: ResponseError | None,
    incomplete_details: IncompleteDetails | None,
) -> ResponseObject:
    """The final response object: the folded output plus how it ended."""
    return replace(
        current,
        status=status,
        completed_at=completed_at,
        usage=usage,
        error=error,
        incomplete_details=incomplete_details,
    )


def _evolve_terminal(
    state: ResponseState,
    event: ResponseCompleted | ResponseFailed | ResponseIncomplete | ResponseCancelled,
) -> ResponseState:
    resp = _resp(state, event)
    if state.open_index is not None:
        raise _fail(state, event, f"output item {state.open_index} is still open")
    status = {
        ResponseCompleted: "completed",
        ResponseFailed: "failed",
        ResponseIncomplete: "incomplete",
        ResponseCancelled: "cancelled",
    }[type(event)]
    if status in ("completed", "incomplete") and not state.started:
        raise _fail(state, event, f"a response that never started cannot be {status}")
    got = event.response
    if status == "failed" and got.error is None:
        raise _fail(state, event, "a failed response must carry an error")
    if status == "incomplete" and got.incomplete_details is None:
        raise _fail(state, event, "an incomplete response must say why")
    if (got.completed_at is None) == (status == "completed"):
        raise _fail(state, event, "completed_at is set exactly when the response completed")
    expected = terminal_snapshot(
        resp,
        status,  # type: ignore[arg-type]
        completed_at=got.completed_at,
        usage=got.usage,
        error=got.error if status == "failed" else None,
        incomplete_details=got.incomplete_details if status == "incomplete" else None,
    )
    _snapshot_check(state, event, expected, got)
    return replace(state, version=event.sequence_number, response=got)


def evolve(state: ResponseState, event: AnyEvent) -> ResponseState:
    """Fold one event into the state; refuses anything the lifecycle does not allow."""
    if event.sequence_number != state.version + 1:
        raise _fail(state, event, f"expected position {state.version + 1}")
    seq = event.sequence_number
    if seq == 1 and state.response is not None:
        # What follows `response.created` is fixed: `queued` (background) or `in_progress`.
        second = ResponseQueued if state.response.background else ResponseInProgress
        if not isinstance(event, second):
            raise _fail(state, event, f"response.created must be followed by {tag_of(second)}")
    match event:
        case ResponseCreated(response=r, facts=facts):
            if state.response is not None:
                raise _fail(state, event, "the response was already created")
            want = "queued" if r.background else "in_progress"
            ended = r.error or r.incomplete_details or r.completed_at is not None
            if r.status != want or r.output or r.usage is not None or ended:
                raise _fail(state, event, f"a new response must be {want} with no output")
            return ResponseState(version=seq, response=r, facts=facts)
        case ResponseQueued(response=r):
            resp = _resp(state, event)
            if resp.status != "queued" or state.version != 0:
                raise _fail(state, event, "response.queued must follow response.created")
            _snapshot_check(state, event, resp, r)
            return replace(state, version=seq)
        case ResponseInProgress(response=r):
            resp = _resp(state, event)
            if state.started:
                raise _fail(state, event, "the response already started")
            expected = replace(resp, status="in_progress")
            _snapshot_check(state, event, expected, r)
            return replace(state, version=seq, response=r, started=True)
        case ResponseCompleted() | ResponseFailed() | ResponseIncomplete() | ResponseCancelled():
            return _evolve_terminal(state, event)
        case OutputItemAdded(output_index=i, item=item):
            resp = _resp(state, event)
            if not state.started or state.open_index is not None:
                raise _fail(state, event, "an item is still open, or the response never started")
            if i != len(resp.output) or item.status != "in_progress":
                raise _fail(
                    state, event, f"a new item must be in_progress at index {len(resp.output)}"
                )
            if _parts(item) or (isinstance(item, FunctionCall) and item.arguments):
                raise _fail(state, event, "a new item must be empty")
            output = [*resp.output, item]
            return replace(
                state,
                version=seq,
                response=replace(resp, output=output),
                open_index=i,
                open_part=None,
                open_summary=None,
                closing=False,
            )
        case ContentPartAdded(item_id=iid, output_index=i, content_index=c, part=part):
            item = _open_item(state, event, i, iid)
            parts = _parts(item)
            fits = (isinstance(item, OutputMessage) and isinstance(part, OutputText | Refusal)) or (
                isinstance(item, ReasoningItem) and isinstance(part, ReasoningText)
            )
            empty = (part.refusal if isinstance(part, Refusal) else part.text) == ""
            if not fits or not empty or c != len(parts) or state.open_part is not None:
                raise _fail(state, event, f"cannot add a {type(part).__name__} at {c}")
            if state.open_summary is not None:
                raise _fail(state, event, "a summary part is still open")
            parts.append(part)
            return _set_item(state, i, _with_parts(item, parts), version=seq, open_part=c)
        case ContentPartDone(item_id=iid, output_index=i, content_index=c, part=part):
            _, have = _open_part(state, event, i, iid, c)
            if have != part:
                raise _fail(state, event, "the final part differs from its deltas")
            _must_be_closing(state, event, "part's final text")
            return replace(state, version=seq, open_part=None, closing=False)
        case OutputTextDelta(item_id=iid, output_index=i, content_index=c, delta=d):
            return _append_text(state, event, i, iid, c, d, OutputText)
        case OutputTextDone(item_id=iid, output_index=i, content_index=c, text=t):
            return _check_text(state, event, i, iid, c, t, OutputText)
        case RefusalDelta(item_id=iid, output_index=i, content_index=c, delta=d):
            return _append_text(state, event, i, iid, c, d, Refusal)
        case RefusalDone(item_id=iid, output_index=i, content_index=c, refusal=t):
            return _check_text(state, event, i, iid, c, t, Refusal)
        case ReasoningTextDelta(item_id=iid, output_index=i, content_index=c, delta=d):
            return _append_text(state, event, i, iid, c, d, ReasoningText)
        case ReasoningTextDone(item_id=iid, output_index=i, content_index=c, text=t):
            return _check_text(state, event, i, iid, c, t, ReasoningText)
        case ReasoningSummaryPartAdded(item_id=iid, output_index=i, summary_index=s, part=part):
            item = _open_item(state, event, i, iid)
            if not isinstance(item, ReasoningItem) or s != len(item.summary) or part.text:
                raise _fail(state, event, f"cannot add summary part {s}")
            if state.open_part is not None or state.open_summary is not None:
                raise _fail(state, event, "another part is still open")
            new = replace(item, summary=[*item.summary, part])
            return _set_item(state, i, new, version=seq, open_summary=s)
        case ReasoningSummaryTextDelta(item_id=iid, output_index=i, summary_index=s, delta=d):
            item, part = _summary(state, event, i, iid, s)
            _not_closing(state, event)
            summary = list(item.summary)
            summary[s] = replace(part, text=part.text + d)
            return _set_item(state, i, replace(item, summary=summary), version=seq)
        case ReasoningSummaryTextDone(item_id=iid, output_index=i, summary_index=s, text=t):
            _, part = _summary(state, event, i, iid, s)
            _not_closing(state, event)
            if part.text != t:
                raise _fail(state, event, "the summary text differs from its deltas")
            return replace(state, version=seq, closing=True)
        case ReasoningSummaryPartDone(item_id=iid, output_index=i, summary_index=s, part=p):
            _, part = _summary(state, event, i, iid, s)
            if part != p:
                raise _fail(state, event, "the summary part differs from its deltas")
            _must_be_closing(state, event, "summary's final text")
            return replace(state, version=seq, open_summary=None, closing=False)
        case FunctionCallArgumentsDelta(item_id=iid, output_index=i, delta=d):
            item = _open_item(state, event, i, iid)
            if not isinstance(item, FunctionCall):
                raise _fail(state, event, f"output item {i} is not a function call")
            _not_closing(state, event)
            return _set_item(state, i, replace(item, arguments=item.arguments + d), version=seq)
        case FunctionCallArgumentsDone(item_id=iid, output_index=i, name=n, arguments=a):
            item = _open_item(state, event, i, iid)
            if not isinstance(item, FunctionCall) or item.arguments != a or item.name != n:
                raise _fail(state, event, "the final arguments differ from their deltas")
            _not_closing(state, event)
            return replace(state, version=seq, closing=True)
        case OutputItemDone(output_index=i, item=done):
            item = _open_item(state, event, i, done.id or "")
            if state.open_part is not None or state.open_summary is not None:
                raise _fail(state, event, "a content part is still open")
            if isinstance(item, FunctionCall):
                _must_be_closing(state, event, "call's final arguments")
            if (
                done.status not in ("completed", "incomplete")
                or replace(item, status=done.status) != done
            ):
                raise _fail(state, event, "the final item differs from its deltas")
            return _set_item(state, i, done, version=seq, open_index=None, closing=False)
    raise _fail(state, event, "unknown event")  # pragma: no cover - the union is closed


def replay(events: Iterable[AnyEvent], state: ResponseState | None = None) -> ResponseState:
    """Fold a stream (or the rest of one) into its state."""
    state = state or ResponseState()
    for event in events:
        state = evolve(state, event)
    return state


def project(state: ResponseState) -> ResponseObject:
    """The OpenAI Response object that the state stands for."""
    if state.response is None:
        raise NotFound("the stream holds no response")
    return state.response


# --- commands -------------------------------------------------------------------------------


class _Batch:
    """Collects a command's events, folding each one as it is made (local, not shared)."""

    def __init__(self, state: ResponseState) -> None:
        self.state = state
        self.events: list[AnyEvent] = []

    def add(self, make: Callable[[int], AnyEvent]) -> None:
        event = make(self.state.version + 1)
        self.state = evolve(self.state, event)
        self.events.append(event)

    def decision(self) -> Decision:
        return Decision(self.events, self.state)

    @property
    def response(self) -> ResponseObject:
        assert self.state.response is not None
        return self.state.response


def _require(state: ResponseState, *allowed: str) -> ResponseObject:
    if state.response is None:
        raise NotFound("no such response")
    if state.response.status not in allowed:
        raise InvalidTransition(
            f"response {state.response.id} is {state.response.status}; "
            f"this needs it {' or '.join(allowed)}"
        )
    return state.response


def create(response: ResponseObject, facts: RequestFacts) -> Decision:
    """Record a new response: `response.created`, then `response.queued` or `.in_progress`."""
    status = "queued" if response.background else "in_progress"
    initial = replace(
        response,
        status=status,
        output=[],
        usage=None,
        error=None,
        incomplete_details=None,
        completed_at=None,
    )
    batch = _Batch(ResponseState())
    batch.add(lambda n: ResponseCreated(sequence_number=n, response=initial, facts=facts))
    if response.background:
        batch.add(lambda n: ResponseQueued(sequence_number=n, response=initial))
    else:
        batch.add(lambda n: ResponseInProgress(sequence_number=n, response=initial))
    return batch.decision()


def start(state: ResponseState) -> Decision:
    """A queued (background) response begins generating."""
    resp = _require(state, "queued")
    batch = _Batch(state)
    batch.add(
        lambda n: ResponseInProgress(
            sequence_number=n, response=replace(resp, status="in_progress")
        )
    )
    return batch.decision()


def _suffix(response_id: str) -> str:
    return response_id.removeprefix("resp_")


def item_id(response_id: str, prefix: str, output_index: int) -> str:
    """Item ids derive from the response id and position, so commands stay pure."""
    return f"{prefix}_{_suffix(response_id)}_{output_index}"


def _close_part(batch: _Batch) -> None:
    state, resp = batch.state, batch.response
    i = state.open_index
    if i is None:
        return
    item = resp.output[i]
    iid = item.id or ""
    if state.open_summary is not None and isinstance(item, ReasoningItem):
        s = state.open_summary
        part = item.summary[s]
        batch.add(
            lambda n: ReasoningSummaryTextDone(
                sequence_number=n, item_id=iid, output_index=i, summary_index=s, text=part.text
            )
        )
        batch.add(
            lambda n: ReasoningSummaryPartDone(
                sequence_number=n, item_id=iid, output_index=i, summary_index=s, part=part
            )
        )
        return
    c = state.open_part
    if c is None:
        return
    p = _parts(item)[c]
    if isinstance(p, OutputText):
        batch.add(
            lambda n: OutputTextDone(
                sequence_number=n, item_id=iid, output_index=i, content_index=c, text=p.text
            )
        )
    elif isinstance(p, Refusal):
        batch.add(
            lambda n: RefusalDone(
                sequence_number=n, item_id=iid, output_index=i, content_index=c, refusal=p.refusal
            )
        )
    else:
        batch.add(
            lambda n: ReasoningTextDone(
                sequence_number=n, item_id=iid, output_index=i, content_index=c, text=p.text
            )
        )
    batch.add(
        lambda n: ContentPartDone(
            sequence_number=n, item_id=iid, output_index=i, content_index=c, part=p
        )
    )


def _close_item(batch: _Batch, status: ItemStatus = "completed") -> None:
    i = batch.state.open_index
    if i is None:
        return
    _close_part(batch)
    item = batch.response.output[i]
    if isinstance(item, FunctionCall):
        iid, name, args = item.id or "", item.name, item.arguments
        batch.add(
            lambda n: FunctionCallArgumentsDone(
                sequence_number=n, item_id=iid, output_index=i, name=name, arguments=args
            )
        )
    done = replace(item, status=status)
    batch.add(lambda n: OutputItemDone(sequence_number=n, output_index=i, item=done))


def _open_new_item(batch: _Batch, item: OutputItem) -> None:
    _close_item(batch)
    i = len(batch.response.output)
    batch.add(lambda n: OutputItemAdded(sequence_number=n, output_index=i, item=item))


def _ensure_message(batch: _Batch, phase: Literal["commentary", "final_answer"] | None) -> None:
    i = batch.state.open_index
    if i is not None:
        item = batch.response.output[i]
        if isinstance(item, OutputMessage) and item.phase == phase:
            return
    rid, n = batch.response.id, len(batch.response.output)
    _open_new_item(
        batch,
        OutputMessage(id=item_id(rid, "msg", n), status="in_progress", content=[], phase=phase),
    )


def _ensure_reasoning(batch: _Batch) -> None:
    i = batch.state.open_index
    if i is not None and isinstance(batch.response.output[i], ReasoningItem):
        return
    rid, n = batch.response.id, len(batch.response.output)
    _open_new_item(batch, ReasoningItem(id=item_id(rid, "rs", n), status="in_progress"))


def _ensure_part(batch: _Batch, fresh: ContentPart) -> int:
    state = batch.state
    assert state.open_index is not None
    item = batch.response.output[state.open_index]
    if state.open_part is not None and type(_parts(item)[state.open_part]) is type(fresh):
        return state.open_part
    _close_part(batch)
    i, iid, c = state.open_index, item.id or "", len(_parts(item))
    batch.add(
        lambda n: ContentPartAdded(
            sequence_number=n, item_id=iid, output_index=i, content_index=c, part=fresh
        )
    )
    return c


def emit(state: ResponseState, delta: AnyDelta) -> Decision:
    """The event builder: turn one semantic delta of an engine into OpenAI stream events."""
    resp = _require(state, "in_progress")
    if not state.started:
        raise InvalidTransition(f"response {resp.id} has not started")
    batch = _Batch(state)
    match delta:
        case TextDelta(text=text, phase=phase):
            if text:
                _ensure_message(batch, phase)
                _add_text(batch, text, OutputText(text=""))
        case RefusalChunk(text=text):
            if text:
                _ensure_message(batch, batch_phase(batch))
                _add_text(batch, text, Refusal(refusal=""))
        case ReasoningTextChunk(text=text):
            if text:
                _ensure_reasoning(batch)
                _add_text(batch, text, ReasoningText(text=""))
        case SummaryDelta(text=text):
            if text:
                _ensure_reasoning(batch)
                _add_summary(batch, text)
        case FunctionCallStart(name=name, call_id=call_id):
            _close_item(batch)
            n = len(batch.response.output)
            rid = resp.id
            _open_new_item(
                batch,
                FunctionCall(
                    id=item_id(rid, "fc", n),
                    call_id=call_id or item_id(rid, "call", n),
                    name=name,
                    arguments="",
                    status="in_progress",
                ),
            )
        case ArgumentsDelta(text=text):
            i = state.open_index
            item = resp.output[i] if i is not None else None
            if not isinstance(item, FunctionCall) or i is None:
                raise InvalidTransition(f"response {resp.id}: arguments with no open function call")
            if text:
                iid = item.id or ""
                batch.add(
                    lambda n: FunctionCallArgumentsDelta(
                        sequence_number=n, item_id=iid, output_index=i, delta=text
                    )
                )
        case EndItem():
            _close_item(batch)
        case Finished():
            raise InvalidTransition("Finished is not a content delta; use finish()")
    return batch.decision()


def batch_phase(batch: _Batch) -> Literal["commentary", "final_answer"] | None:
    """A refusal joins the open message whatever its phase."""
    i = batch.state.open_index
    if i is not None:
        item = batch.response.output[i]
        if isinstance(item, OutputMessage):
            return item.phase
    return None


def _add_text(batch: _Batch, text: str, fresh: ContentPart) -> None:
    c = _ensure_part(batch, fresh)
    i = batch.state.open_index
    assert i is not None
    iid = batch.response.output[i].id or ""
    if isinstance(fresh, OutputText):
        batch.add(
            lambda n: OutputTextDelta(
                sequence_number=n, item_id=iid, output_index=i, content_index=c, delta=text
            )
        )
    elif isinstance(fresh, Refusal):
        batch.add(
            lambda n: RefusalDelta(
                sequence_number=n, item_id=iid, output_index=i, content_index=c, delta=text
            )
        )
    else:
        batch.add(
            lambda n: ReasoningTextDelta(
                sequence_number=n, item_id=iid, output_index=i, content_index=c, delta=text
            )
        )


def _add_summary(batch: _Batch, text: str) -> None:
    state = batch.state
    i = state.open_index
    assert i is not None
    item = batch.response.output[i]
    assert isinstance(item, ReasoningItem)
    iid = item.id
    if state.open_summary is None:
        _close_part(batch)
        s = len(item.summary)
        batch.add(
            lambda n: ReasoningSummaryPartAdded(
                sequence_number=n,
                item_id=iid,
                output_index=i,
                summary_index=s,
                part=SummaryText(text=""),
            )
        )
    s2 = batch.state.open_summary
    assert s2 is not None
    batch.add(
        lambda n: ReasoningSummaryTextDelta(
            sequence_number=n, item_id=iid, output_index=i, summary_index=s2, delta=text
        )
    )


def to_usage(usage: TokenUsage) -> Usage:
    return Usage(
        input_tokens=usage.input_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=usage.cached_tokens),
        output_tokens=usage.output_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=usage.reasoning_tokens),
        total_tokens=usage.input_tokens + usage.output_tokens,
    )


def finish(state: ResponseState, finished: Finished, *, now: int) -> Decision:
    """The engine finished: close what is open; `completed`, or `incomplete` if cut off."""
    _require(state, "in_progress")
    batch = _Batch(state)
    usage = to_usage(finished.usage)
    if finished.reason == "stop":
        _close_item(batch)
        final = terminal_snapshot(
            batch.response,
            "completed",
            completed_at=now,
            usage=usage,
            error=None,
            incomplete_details=None,
        )
        batch.add(lambda n: ResponseCompleted(sequence_number=n, response=final))
    else:
        _close_item(batch, "incomplete")
        why: Literal["max_output_tokens", "content_filter"] = (
            "max_output_tokens" if finished.reason == "length" else "content_filter"
        )
        final = terminal_snapshot(
            batch.response,
            "incomplete",
            completed_at=None,
            usage=usage,
            error=None,
            incomplete_details=IncompleteDetails(reason=why),
        )
        facts = EndFacts(reason=why)
        batch.add(lambda n: ResponseIncomplete(sequence_number=n, response=final, facts=facts))
    return batch.decision()


def fail(
    state: ResponseState,
    *,
    code: str,
    message: str,
    reason: str,
    detail: str | None = None,
    usage: TokenUsage | None = None,
) -> Decision:
    """End the response as `failed`: `message` is for the client, `detail` for operators."""
    _require(state, "queued", "in_progress")
    batch = _Batch(state)
    _close_item(batch, "incomplete")
    final = terminal_snapshot(
        batch.response,
        "failed",
        completed_at=None,
        usage=to_usage(usage) if usage else None,
        error=ResponseError(code=code, message=message),
        incomplete_details=None,
    )
    facts = EndFacts(reason=reason, detail=detail)
    batch.add(lambda n: ResponseFailed(sequence_number=n, response=final, facts=facts))
    return batch.decision()


def cancel(state: ResponseState, *, reason: str, usage: TokenUsage | None = None) -> Decision:
    """End the response as `cancelled` (a user's cancel, or the client went away)."""
    _require(state, "queued", "in_progress")
    batch = _Batch(state)
    _close_item(batch, "incomplete")
    final = terminal_snapshot(
        batch.response,
        "cancelled",
        completed_at=None,
        usage=to_usage(usage) if usage else None,
        error=None,
        incomplete_details=None,
    )
    facts = EndFacts(reason=reason)
    batch.add(lambda n: ResponseCancelled(sequence_number=n, response=final, facts=facts))
    return batch.decision()
