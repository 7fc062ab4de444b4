"""The response aggregate: its lifecycle, the strictness of `evolve`, the event builder,
how a response ends, and that every projection is an OpenAI `Response`."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from domain.builder.emit import emit
from domain.builder.finish import finish
from domain.commands import cancel, create, fail, prepare, start
from domain.errors import InvalidTransition, NotFound
from domain.events import (
    AnyEvent,
    ContentPartDone,
    EndFacts,
    FunctionCallArgumentsDone,
    LifecycleEvent,
    OutputItemAdded,
    OutputItemDone,
    OutputRefusalDelta,
    OutputRefusalDone,
    OutputTextDelta,
    OutputTextDone,
    ReasoningSummaryTextDone,
    ReasoningTextDone,
    ResponseCancelled,
    ResponseCompleted,
    ResponseCreated,
    ResponseFailed,
    ResponseIncomplete,
    ResponseInProgress,
    ResponseQueued,
    TerminalEvent,
)
from domain.fold.replay import evolve, project, replay
from domain.generation import (
    AnyDelta,
    ArgumentsDelta,
    EndItem,
    Finished,
    FinishReason,
    FunctionCallStart,
    ReasoningDelta,
    RefusalDelta,
    SummaryDelta,
    TextDelta,
    TokenUsage,
)
from domain.objects import (
    FunctionCall,
    IncompleteDetails,
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningText,
    Refusal,
    ResponseError,
    ResponseObject,
    SummaryText,
    Usage,
)
from domain.state import Decision, ResponseState
from tests.unit.domain_helpers import (
    NOW,
    RESPONSE_ID,
    SCENARIOS,
    SUFFIX,
    Stream,
    make_facts,
    make_response,
    sdk_response,
    tags,
)

replace = msgspec.structs.replace
STOP = Finished(reason="stop", usage=TokenUsage())


def _terminal_events(events: list[AnyEvent]) -> list[int]:
    return [i for i, e in enumerate(events) if isinstance(e, TerminalEvent)]


# --- create and start -----------------------------------------------------------------------


def test_create_in_the_foreground_writes_created_then_in_progress() -> None:
    s = Stream.new()
    assert tags(s.events) == ["response.created", "response.in_progress"]
    assert [e.sequence_number for e in s.events] == [0, 1]
    created, in_progress = s.events
    assert isinstance(created, ResponseCreated)
    assert isinstance(in_progress, ResponseInProgress)
    assert created.response.status == "in_progress"
    assert created.facts == make_facts()
    assert s.state.status == "in_progress"
    assert s.state.started
    assert s.state.version == 1
    assert s.state.facts == make_facts()


def test_create_in_the_background_writes_created_then_queued() -> None:
    s = Stream.new(background=True)
    assert tags(s.events) == ["response.created", "response.queued"]
    assert all(e.response.status == "queued" for e in s.events)  # type: ignore[union-attr]
    assert s.state.status == "queued"
    assert not s.state.started


def test_create_starts_from_a_clean_snapshot_whatever_it_is_given() -> None:
    dirty = make_response(
        status="completed",
        output=[OutputMessage(id="m", status="completed", content=[OutputText(text="x")])],
        usage=Usage(input_tokens=1, output_tokens=1, total_tokens=2),
        error=ResponseError(code="server_error", message="x"),
        completed_at=5,
    )
    d = create(dirty, make_facts())
    resp = project(d.state)
    assert resp.status == "in_progress"
    assert (resp.output, resp.usage, resp.error, resp.completed_at) == ([], None, None, None)
    assert resp.model == dirty.model
    assert resp.tools == dirty.tools
    assert resp.instructions == dirty.instructions


@pytest.mark.parametrize("background", [False, True])
def test_prepare_records_and_completes_a_response_with_no_output(background: bool) -> None:
    """OpenAI's WebSocket `generate: false`: one decision, from `response.created` to
    `response.completed`, no output, no tokens; its replay is the same state."""
    d = prepare(make_response(background=background), make_facts(), now=NOW)
    middle = ["response.queued", "response.in_progress"] if background else ["response.in_progress"]
    assert tags(d.events) == ["response.created", *middle, "response.completed"]
    assert [e.sequence_number for e in d.events] == list(range(len(d.events)))
    assert d.state.status == "completed" and d.state.response is not None
    assert d.state.response.output == [] and d.state.response.usage is not None
    assert d.state.response.usage.total_tokens == 0
    assert replay(d.events) == d.state


def test_start_moves_a_queued_response_to_in_progress() -> None:
    s = Stream.new(background=True)
    new = s.start()
    assert tags(new) == ["response.in_progress"]
    assert new[0].sequence_number == 2
    assert s.state.status == "in_progress"
    assert s.state.started


def test_start_refuses_a_response_that_is_already_running() -> None:
    s = Stream.new()
    with pytest.raises(InvalidTransition):
        start(s.state)


@pytest.mark.parametrize(
    "command",
    [
        lambda st: start(st),
        lambda st: emit(st, TextDelta(text="x")),
        lambda st: finish(st, STOP, now=NOW),
        lambda st: fail(st, code="c", message="m", reason="r"),
        lambda st: cancel(st, reason="r"),
    ],
    ids=["start", "emit", "finish", "fail", "cancel"],
)
def test_commands_on_an_empty_stream_raise_not_found(
    command: Callable[[ResponseState], Decision],
) -> None:
    with pytest.raises(NotFound):
        command(ResponseState())


def test_project_of_an_empty_stream_raises_not_found() -> None:
    with pytest.raises(NotFound):
        project(ResponseState())


# --- the lifecycle table --------------------------------------------------------------------

LIFECYCLE_PATHS: dict[str, tuple[bool, Callable[[Stream], object], list[str]]] = {
    "fg_completed": (
        False,
        lambda s: s.finish(),
        ["response.created", "response.in_progress", "response.completed"],
    ),
    "fg_incomplete": (
        False,
        lambda s: s.finish("length"),
        ["response.created", "response.in_progress", "response.incomplete"],
    ),
    "fg_failed": (
        False,
        lambda s: s.fail(),
        ["response.created", "response.in_progress", "response.failed"],
    ),
    "fg_cancelled": (
        False,
        lambda s: s.cancel(),
        ["response.created", "response.in_progress", "response.incomplete"],
    ),
    "bg_completed": (
        True,
        lambda s: (s.start(), s.finish()),
        ["response.created", "response.queued", "response.in_progress", "response.completed"],
    ),
    "bg_incomplete": (
        True,
        lambda s: (s.start(), s.finish("content_filter")),
        ["response.created", "response.queued", "response.in_progress", "response.incomplete"],
    ),
    "bg_started_failed": (
        True,
        lambda s: (s.start(), s.fail()),
        ["response.created", "response.queued", "response.in_progress", "response.failed"],
    ),
    "bg_started_cancelled": (
        True,
        lambda s: (s.start(), s.cancel()),
        ["response.created", "response.queued", "response.in_progress", "response.incomplete"],
    ),
    "bg_queued_failed": (
        True,
        lambda s: s.fail(),
        ["response.created", "response.queued", "response.failed"],
    ),
    "bg_queued_cancelled": (
        True,
        lambda s: s.cancel(),
        ["response.created", "response.queued", "response.incomplete"],
    ),
}


def _ended(path: str) -> Stream:
    background, drive, _ = LIFECYCLE_PATHS[path]
    s = Stream.new(background=background)
    drive(s)
    return s


@pytest.mark.parametrize("path", LIFECYCLE_PATHS)
def test_every_legal_path_ends_with_exactly_one_terminal_event_last(path: str) -> None:
    s = _ended(path)
    expected_tags = LIFECYCLE_PATHS[path][2]
    assert tags(s.events) == expected_tags
    assert _terminal_events(s.events) == [len(s.events) - 1]
    assert s.state.terminal
    # A cancellation goes on the wire as `response.incomplete` (status `cancelled`).
    assert s.state.status == path.rsplit("_", 1)[-1]
    assert replay(s.events) == s.state


@pytest.mark.parametrize("reason", ["stop", "length", "content_filter"])
def test_completed_and_incomplete_are_unreachable_from_queued(reason: FinishReason) -> None:
    s = Stream.new(background=True)
    with pytest.raises(InvalidTransition):
        finish(s.state, Finished(reason=reason, usage=TokenUsage()), now=NOW)


@pytest.mark.parametrize("status", ["completed", "incomplete"])
def test_evolve_refuses_a_queued_response_ending_completed_or_incomplete(status: str) -> None:
    s = Stream.new(background=True)
    snap = replace(project(s.state), status=status)
    event: AnyEvent
    if status == "completed":
        event = ResponseCompleted(sequence_number=2, response=snap)
    else:
        snap = replace(snap, incomplete_details=IncompleteDetails(reason="max_output_tokens"))
        event = ResponseIncomplete(sequence_number=2, response=snap)
    with pytest.raises(InvalidTransition, match="never started"):
        evolve(s.state, event)


def test_the_builder_refuses_a_queued_response() -> None:
    s = Stream.new(background=True)
    with pytest.raises(InvalidTransition):
        emit(s.state, TextDelta(text="too early"))


COMMANDS: dict[str, Callable[[ResponseState], Decision]] = {
    "start": start,
    "emit_text": lambda st: emit(st, TextDelta(text="x")),
    "emit_end_item": lambda st: emit(st, EndItem()),
    "finish": lambda st: finish(st, STOP, now=NOW),
    "fail": lambda st: fail(st, code="server_error", message="m", reason="r"),
    "cancel": lambda st: cancel(st, reason="r"),
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("path", LIFECYCLE_PATHS)
def test_commands_on_a_terminal_response_raise(path: str, command: str) -> None:
    s = _ended(path)
    before = s.state
    with pytest.raises(InvalidTransition):
        COMMANDS[command](s.state)
    assert s.state == before


def test_a_second_cancel_raises_rather_than_appending() -> None:
    s = Stream.new()
    s.cancel()
    with pytest.raises(InvalidTransition, match="cancelled"):
        cancel(s.state, reason="again")


# --- evolve is strict -----------------------------------------------------------------------


def _open_text_stream() -> Stream:
    s = Stream.new()
    s.emit(TextDelta(text="Hel"), TextDelta(text="lo"))
    return s


def _next(s: Stream) -> int:
    return s.state.version + 1


def _msg_id(i: int) -> str:
    return f"msg_{SUFFIX}_{i}"


def _text_delta(s: Stream, **kw: object) -> OutputTextDelta:
    args: dict[str, object] = {
        "sequence_number": _next(s),
        "item_id": _msg_id(0),
        "output_index": 0,
        "content_index": 0,
        "delta": "!",
    }
    args.update(kw)
    return OutputTextDelta(**args)  # type: ignore[arg-type]


def _completed_tail(s: Stream) -> tuple[ResponseState, ResponseCompleted]:
    """The state one step before a stream's `response.completed`, and that event."""
    *body, last = finish(s.state, STOP, now=NOW).events
    assert isinstance(last, ResponseCompleted)
    return replay(body, s.state), last


def _with_text(resp: ResponseObject, text: str) -> ResponseObject:
    item = resp.output[0]
    assert isinstance(item, OutputMessage)
    return replace(resp, output=[replace(item, content=[OutputText(text=text)])])


Case = tuple[ResponseState, AnyEvent, str]


def _illegal_cases() -> dict[str, Callable[[], Case]]:
    def gap() -> Case:
        s = _open_text_stream()
        return s.state, _text_delta(s, sequence_number=_next(s) + 1), "expected position"

    def duplicate() -> Case:
        s = _open_text_stream()
        return s.state, s.events[-1], "expected position"

    def first_is_not_created() -> Case:
        s = Stream.new()
        return ResponseState(), replace(s.events[1], sequence_number=0), "does not start"

    def second_created() -> Case:
        s = Stream.new()
        return s.state, replace(s.events[0], sequence_number=2), "already created"

    def created_with_output() -> Case:
        resp = replace(make_response(), output=[FunctionCall(call_id="c", name="n", arguments="")])
        return ResponseState(), ResponseCreated(sequence_number=0, response=resp), "no output"

    def created_with_wrong_status() -> Case:
        resp = make_response(background=True, status="in_progress")
        return (
            ResponseState(),
            ResponseCreated(sequence_number=0, response=resp),
            "must be queued",
        )

    def queued_after_start() -> Case:
        s = Stream.new(background=True)
        s.start()
        snap = project(s.state)
        return s.state, ResponseQueued(sequence_number=3, response=snap), "must follow"

    def queued_twice() -> Case:
        s = Stream.new(background=True)
        return s.state, replace(s.events[1], sequence_number=2), "must follow"

    def queued_snapshot_differs() -> Case:
        created = Stream.new(background=True).events[0]
        state = evolve(ResponseState(), created)
        snap = replace(project(state), model="another-model")
        return state, ResponseQueued(sequence_number=1, response=snap), "snapshot differs"

    def started_twice() -> Case:
        s = Stream.new()
        return s.state, replace(s.events[1], sequence_number=2), "already started"

    def in_progress_snapshot_differs() -> Case:
        s = Stream.new(background=True)
        snap = replace(project(s.state), status="in_progress", temperature=1.5)
        return s.state, ResponseInProgress(sequence_number=2, response=snap), "snapshot differs"

    def item_before_start() -> Case:
        s = Stream.new(background=True)
        item = OutputMessage(id=_msg_id(0), status="in_progress")
        return (
            s.state,
            OutputItemAdded(sequence_number=2, output_index=0, item=item),
            "never started",
        )

    def item_while_another_is_open() -> Case:
        s = _open_text_stream()
        item = OutputMessage(id=_msg_id(1), status="in_progress")
        ev = OutputItemAdded(sequence_number=_next(s), output_index=1, item=item)
        return s.state, ev, "still open"

    def item_at_wrong_index() -> Case:
        s = Stream.new()
        item = OutputMessage(id=_msg_id(3), status="in_progress")
        return s.state, OutputItemAdded(sequence_number=2, output_index=3, item=item), "at index 0"

    def item_not_empty() -> Case:
        s = Stream.new()
        item = FunctionCall(id="fc", call_id="c", name="n", arguments="{}", status="in_progress")
        return s.state, OutputItemAdded(sequence_number=2, output_index=0, item=item), "empty"

    def delta_for_a_closed_item() -> Case:
        s = _open_text_stream()
        s.emit(EndItem())
        return s.state, _text_delta(s), "not open"

    def delta_with_a_wrong_item_id() -> Case:
        s = _open_text_stream()
        return s.state, _text_delta(s, item_id="msg_someone_else_0"), "is not"

    def delta_for_a_part_not_open() -> Case:
        s = _open_text_stream()
        return s.state, _text_delta(s, content_index=1), "content part 1 is not open"

    def refusal_delta_into_a_text_part() -> Case:
        s = _open_text_stream()
        ev = OutputRefusalDelta(
            sequence_number=_next(s), item_id=_msg_id(0), output_index=0, content_index=0, delta="x"
        )
        return s.state, ev, "is a OutputText"

    def text_done_differs() -> Case:
        s = _open_text_stream()
        ev = OutputTextDone(
            sequence_number=_next(s),
            item_id=_msg_id(0),
            output_index=0,
            content_index=0,
            text="Hello world",
        )
        return s.state, ev, "differs from its deltas"

    def refusal_done_differs() -> Case:
        s = Stream.new()
        s.emit(RefusalDelta(text="No"))
        ev = OutputRefusalDone(
            sequence_number=_next(s),
            item_id=_msg_id(0),
            output_index=0,
            content_index=0,
            refusal="Nope",
        )
        return s.state, ev, "differs from its deltas"

    def reasoning_done_differs() -> Case:
        s = Stream.new()
        s.emit(ReasoningDelta(text="think"))
        ev = ReasoningTextDone(
            sequence_number=_next(s),
            item_id=f"rs_{SUFFIX}_0",
            output_index=0,
            content_index=0,
            text="thin",
        )
        return s.state, ev, "differs from its deltas"

    def summary_done_differs() -> Case:
        s = Stream.new()
        s.emit(SummaryDelta(text="sum"))
        ev = ReasoningSummaryTextDone(
            sequence_number=_next(s),
            item_id=f"rs_{SUFFIX}_0",
            output_index=0,
            summary_index=0,
            text="summary",
        )
        return s.state, ev, "differs from its deltas"

    def arguments_done_differ() -> Case:
        s = Stream.new()
        s.emit(FunctionCallStart(name="f"), ArgumentsDelta(text='{"a": 1}'))
        ev = FunctionCallArgumentsDone(
            sequence_number=_next(s),
            item_id=f"fc_{SUFFIX}_0",
            output_index=0,
            name="f",
            arguments='{"a": 2}',
        )
        return s.state, ev, "differ from their deltas"

    def part_done_differs() -> Case:
        s = _open_text_stream()
        ev = ContentPartDone(
            sequence_number=_next(s),
            item_id=_msg_id(0),
            output_index=0,
            content_index=0,
            part=OutputText(text="Help"),
        )
        return s.state, ev, "differs from its deltas"

    def item_done_with_a_part_open() -> Case:
        s = _open_text_stream()
        item = OutputMessage(id=_msg_id(0), status="completed", content=[OutputText(text="Hello")])
        return (
            s.state,
            OutputItemDone(sequence_number=_next(s), output_index=0, item=item),
            "still open",
        )

    def item_done_differs() -> Case:
        s = _open_text_stream()
        *body, done = emit(s.state, EndItem()).events
        assert isinstance(done, OutputItemDone)
        forged = replace(done, item=replace(done.item, content=[OutputText(text="Forged")]))
        return replay(body, s.state), forged, "differs from its deltas"

    def terminal_output_differs() -> Case:
        state, last = _completed_tail(_open_text_stream())
        return (
            state,
            replace(last, response=_with_text(last.response, "Hello?")),
            "snapshot differs",
        )

    def terminal_with_an_open_item() -> Case:
        s = _open_text_stream()
        snap = replace(project(s.state), status="completed")
        return s.state, ResponseCompleted(sequence_number=_next(s), response=snap), "still open"

    def terminal_changes_the_config() -> Case:
        state, last = _completed_tail(Stream.new())
        forged = replace(last, response=replace(last.response, instructions="other"))
        return state, forged, "snapshot differs"

    def failed_without_error() -> Case:
        s = Stream.new()
        snap = replace(project(s.state), status="failed")
        return s.state, ResponseFailed(sequence_number=2, response=snap), "must carry an error"

    def incomplete_without_reason() -> Case:
        s = Stream.new()
        snap = replace(project(s.state), status="incomplete")
        return s.state, ResponseIncomplete(sequence_number=2, response=snap), "must say why"

    def event_after_terminal() -> Case:
        s = Stream.new()
        s.finish()
        snap = replace(project(s.state), status="cancelled", completed_at=None)
        return (
            s.state,
            ResponseCancelled(sequence_number=_next(s), response=snap),
            "already completed",
        )

    def item_after_terminal() -> Case:
        s = Stream.new()
        s.cancel()
        item = OutputMessage(id=_msg_id(0), status="in_progress")
        ev = OutputItemAdded(sequence_number=_next(s), output_index=0, item=item)
        return s.state, ev, "already cancelled"

    return {f.__name__: f for f in locals().values() if callable(f)}


ILLEGAL = _illegal_cases()


@pytest.mark.parametrize("case", ILLEGAL)
def test_evolve_refuses_an_event_the_commands_could_not_have_made(case: str) -> None:
    state, event, why = ILLEGAL[case]()
    with pytest.raises(InvalidTransition, match=why) as info:
        evolve(state, event)
    assert f"event {event.sequence_number} " in str(info.value)


def test_replay_fails_at_the_offending_position() -> None:
    s = SCENARIOS["rich_completed"]()
    events = list(s.events)
    victim = next(i for i, e in enumerate(events) if isinstance(e, OutputTextDelta))
    bad = events[victim]
    assert isinstance(bad, OutputTextDelta)
    events[victim] = replace(bad, delta=bad.delta + "!")
    # The deltas still fold; it is the `…done` text after them that no longer matches.
    with pytest.raises(InvalidTransition, match=r"event \d+ \(OutputTextDone\)"):
        replay(events)


def test_replay_refuses_events_out_of_order() -> None:
    events = list(SCENARIOS["background_completed"]().events)
    events[3], events[4] = events[4], events[3]
    with pytest.raises(InvalidTransition, match="expected position 3"):
        replay(events)


# --- the event builder ----------------------------------------------------------------------


def test_items_get_indices_and_ids_in_order_reasoning_text_call() -> None:
    s = Stream.new()
    s.emit(
        ReasoningDelta(text="r"),
        TextDelta(text="t"),
        FunctionCallStart(name="get_weather"),
        EndItem(),
    )
    added = [e for e in s.events if isinstance(e, OutputItemAdded)]
    assert [e.output_index for e in added] == [0, 1, 2]
    assert [e.item.id for e in added] == [f"rs_{SUFFIX}_0", f"msg_{SUFFIX}_1", f"fc_{SUFFIX}_2"]
    call = project(s.state).output[2]
    assert isinstance(call, FunctionCall)
    assert call.call_id == f"call_{SUFFIX}_2"
    assert [i.status for i in project(s.state).output] == ["completed"] * 3


def test_every_event_of_an_item_names_its_index_and_id() -> None:
    s = SCENARIOS["rich_completed"]()
    ids = {i: item.id for i, item in enumerate(project(s.state).output)}
    for e in s.events:
        if hasattr(e, "item_id"):
            assert e.item_id == ids[getattr(e, "output_index")]  # noqa: B009
        if isinstance(e, OutputItemAdded | OutputItemDone):
            assert e.item.id == ids[e.output_index]


def test_an_engine_call_id_is_kept() -> None:
    s = Stream.new()
    s.emit(FunctionCallStart(name="f", call_id="call_from_engine"))
    item = project(s.state).output[0]
    assert isinstance(item, FunctionCall)
    assert item.call_id == "call_from_engine"


def test_a_kind_change_closes_the_previous_item_first() -> None:
    s = Stream.new()
    s.emit(ReasoningDelta(text="hmm"))
    assert tags(s.emit(TextDelta(text="Hi"))) == [
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert tags(s.emit(FunctionCallStart(name="f"))) == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
    ]
    assert tags(s.emit(ReasoningDelta(text="more"))) == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
    ]


def test_more_text_of_the_same_kind_is_one_delta_event() -> None:
    s = Stream.new()
    s.emit(TextDelta(text="a"))
    new = s.emit(TextDelta(text="b"))
    assert tags(new) == ["response.output_text.delta"]
    assert isinstance(new[0], OutputTextDelta)
    assert (new[0].output_index, new[0].content_index, new[0].delta) == (0, 0, "b")


def test_done_events_carry_the_full_text() -> None:
    s = Stream.new()
    s.emit(TextDelta(text="Hel"), TextDelta(text="lo, "), TextDelta(text="world"), EndItem())
    (text_done,) = [e for e in s.events if isinstance(e, OutputTextDone)]
    (part_done,) = [e for e in s.events if isinstance(e, ContentPartDone)]
    (item_done,) = [e for e in s.events if isinstance(e, OutputItemDone)]
    assert text_done.text == "Hello, world"
    assert part_done.part == OutputText(text="Hello, world")
    assert isinstance(item_done.item, OutputMessage)
    assert item_done.item.content == [OutputText(text="Hello, world")]
    assert item_done.item.status == "completed"


def test_done_events_of_refusal_reasoning_summary_and_arguments_carry_the_full_text() -> None:
    s = Stream.new()
    s.emit(
        ReasoningDelta(text="th"),
        ReasoningDelta(text="ink"),
        SummaryDelta(text="su"),
        SummaryDelta(text="m"),
        RefusalDelta(text="no"),
        RefusalDelta(text="pe"),
        FunctionCallStart(name="f"),
        ArgumentsDelta(text='{"a"'),
        ArgumentsDelta(text=": 1}"),
        EndItem(),
    )
    by_type = {type(e): e for e in s.events}
    reasoning_done = by_type[ReasoningTextDone]
    summary_done = by_type[ReasoningSummaryTextDone]
    refusal_done = by_type[OutputRefusalDone]
    args_done = by_type[FunctionCallArgumentsDone]
    assert isinstance(reasoning_done, ReasoningTextDone)
    assert isinstance(summary_done, ReasoningSummaryTextDone)
    assert isinstance(refusal_done, OutputRefusalDone)
    assert isinstance(args_done, FunctionCallArgumentsDone)
    assert reasoning_done.text == "think"
    assert summary_done.text == "sum"
    assert refusal_done.refusal == "nope"
    assert (args_done.name, args_done.arguments) == ("f", '{"a": 1}')
    reasoning, message, call = project(s.state).output
    assert isinstance(reasoning, ReasoningItem)
    assert reasoning.content == [ReasoningText(text="think")]
    assert reasoning.summary == [SummaryText(text="sum")]
    assert isinstance(message, OutputMessage)
    assert message.content == [Refusal(refusal="nope")]
    assert isinstance(call, FunctionCall)
    assert call.arguments == '{"a": 1}'


def test_summary_and_reasoning_text_alternate_within_one_reasoning_item() -> None:
    s = Stream.new()
    assert tags(s.emit(SummaryDelta(text="s1"))) == [
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
    ]
    assert tags(s.emit(ReasoningDelta(text="r1"))) == [
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.content_part.added",
        "response.reasoning_text.delta",
    ]
    assert tags(s.emit(SummaryDelta(text="s2"))) == [
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
    ]
    item = project(s.state).output[0]
    assert isinstance(item, ReasoningItem)
    assert item.summary == [SummaryText(text="s1"), SummaryText(text="s2")]
    assert item.content == [ReasoningText(text="r1")]


def test_a_phase_change_starts_a_new_message() -> None:
    s = Stream.new()
    s.emit(TextDelta(text="Checking.", phase="commentary"))
    new = s.emit(TextDelta(text="Done.", phase="final_answer"))
    assert tags(new)[:4] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
    ]
    first, second = project(s.state).output
    assert isinstance(first, OutputMessage)
    assert isinstance(second, OutputMessage)
    assert (first.phase, second.phase) == ("commentary", "final_answer")


def test_a_refusal_joins_the_open_message_as_a_new_part() -> None:
    s = Stream.new()
    s.emit(TextDelta(text="Sure", phase="final_answer"))
    new = s.emit(RefusalDelta(text="actually, no"))
    assert tags(new) == [
        "response.output_text.done",
        "response.content_part.done",
        "response.content_part.added",
        "response.refusal.delta",
    ]
    (message,) = project(s.state).output
    assert isinstance(message, OutputMessage)
    assert message.phase == "final_answer"
    assert message.content == [OutputText(text="Sure"), Refusal(refusal="actually, no")]


def test_a_new_call_closes_the_open_call() -> None:
    s = Stream.new()
    s.emit(FunctionCallStart(name="a"), ArgumentsDelta(text="{}"))
    new = s.emit(FunctionCallStart(name="b"))
    assert tags(new) == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
    ]
    names = [i.name for i in project(s.state).output if isinstance(i, FunctionCall)]
    assert names == ["a", "b"]


def test_text_after_end_item_opens_a_new_message() -> None:
    s = Stream.new()
    s.emit(TextDelta(text="one"), EndItem())
    new = s.emit(TextDelta(text="two"))
    assert tags(new)[0] == "response.output_item.added"
    assert len(project(s.state).output) == 2


@pytest.mark.parametrize(
    "delta",
    [
        TextDelta(text=""),
        TextDelta(text="", phase="commentary"),
        RefusalDelta(text=""),
        ReasoningDelta(text=""),
        SummaryDelta(text=""),
    ],
    ids=repr,
)
@pytest.mark.parametrize("setup", ["nothing_open", "text_open", "call_open"])
def test_empty_deltas_produce_nothing(delta: AnyDelta, setup: str) -> None:
    s = Stream.new()
    if setup == "text_open":
        s.emit(TextDelta(text="x"))
    elif setup == "call_open":
        s.emit(FunctionCallStart(name="f"), ArgumentsDelta(text="{"))
    d = emit(s.state, delta)
    assert d.events == []
    assert d.state == s.state


def test_end_item_with_nothing_open_produces_nothing() -> None:
    s = Stream.new()
    s.emit(TextDelta(text="x"), EndItem())
    d = emit(s.state, EndItem())
    assert d.events == []
    assert d.state == s.state


def test_empty_arguments_into_an_open_call_produce_nothing() -> None:
    s = Stream.new()
    s.emit(FunctionCallStart(name="f"))
    d = emit(s.state, ArgumentsDelta(text=""))
    assert d.events == []
    assert d.state == s.state


@pytest.mark.parametrize(
    "setup",
    [(), (TextDelta(text="x"),), (FunctionCallStart(name="f"), EndItem())],
    ids=["nothing_open", "message_open", "call_closed"],
)
def test_arguments_without_an_open_function_call_raise(setup: tuple[AnyDelta, ...]) -> None:
    s = Stream.new()
    s.emit(*setup)
    for text in ("{}", ""):
        with pytest.raises(InvalidTransition, match="no open function call"):
            emit(s.state, ArgumentsDelta(text=text))


def test_finished_is_not_a_content_delta() -> None:
    s = Stream.new()
    with pytest.raises(InvalidTransition):
        emit(s.state, STOP)


# --- how a response ends ----------------------------------------------------------------------


def _last(s: Stream) -> LifecycleEvent:
    last = s.events[-1]
    assert isinstance(last, TerminalEvent)
    return last


def test_finish_stop_closes_the_open_item_and_completes() -> None:
    s = _open_text_stream()
    new = s.finish(usage=TokenUsage(input_tokens=7, output_tokens=3))
    assert tags(new) == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    resp = project(s.state)
    assert resp.status == "completed"
    assert resp.completed_at == NOW
    assert resp.output[0].status == "completed"
    assert (resp.error, resp.incomplete_details) == (None, None)
    assert _last(s).response == resp


def test_finish_length_is_incomplete_for_max_output_tokens_and_marks_open_items() -> None:
    s = Stream.new()
    s.emit(ReasoningDelta(text="r"), TextDelta(text="cut o"))
    s.finish("length")
    last = _last(s)
    assert isinstance(last, ResponseIncomplete)
    resp = project(s.state)
    assert resp.status == "incomplete"
    assert resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert resp.completed_at is None
    assert [i.status for i in resp.output] == ["completed", "incomplete"]
    item_done = [e for e in s.events if isinstance(e, OutputItemDone)][-1]
    assert item_done.item.status == "incomplete"
    assert last.facts == EndFacts(reason="max_output_tokens")


def test_finish_content_filter_is_incomplete_for_content_filter() -> None:
    s = _open_text_stream()
    s.finish("content_filter")
    resp = project(s.state)
    assert resp.status == "incomplete"
    assert resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "content_filter"
    assert resp.output[0].status == "incomplete"


def test_finish_with_nothing_open_only_completes() -> None:
    s = Stream.new()
    s.emit(TextDelta(text="x"), EndItem())
    assert tags(s.finish()) == ["response.completed"]


def test_usage_maps_totals_and_details() -> None:
    s = Stream.new()
    s.finish(
        usage=TokenUsage(input_tokens=100, cached_tokens=40, output_tokens=25, reasoning_tokens=9)
    )
    usage = project(s.state).usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (100, 25, 125)
    assert usage.input_tokens_details.cached_tokens == 40
    assert usage.output_tokens_details.reasoning_tokens == 9


def test_fail_from_queued_writes_only_the_failure() -> None:
    s = Stream.new(background=True)
    new = s.fail(code="server_error", message="worker lost", reason="lease", detail="host-7")
    assert tags(new) == ["response.failed"]
    last = _last(s)
    assert isinstance(last, ResponseFailed)
    assert last.response.error == ResponseError(code="server_error", message="worker lost")
    assert last.response.output == []
    assert (last.response.usage, last.response.completed_at) == (None, None)
    assert last.facts == EndFacts(reason="lease", detail="host-7")


def test_fail_mid_text_keeps_the_text_so_far_and_marks_the_item_incomplete() -> None:
    s = _open_text_stream()
    new = s.fail(usage=TokenUsage(input_tokens=2, output_tokens=1))
    assert tags(new) == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.failed",
    ]
    resp = project(s.state)
    assert (resp.status, resp.completed_at) == ("failed", None)
    (message,) = resp.output
    assert isinstance(message, OutputMessage)
    assert message.status == "incomplete"
    assert message.content == [OutputText(text="Hello")]
    assert resp.usage is not None
    assert resp.usage.total_tokens == 3


def test_fail_mid_function_call_closes_its_arguments() -> None:
    s = Stream.new()
    s.emit(FunctionCallStart(name="f"), ArgumentsDelta(text='{"a'))
    new = s.fail()
    assert tags(new) == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.failed",
    ]
    (call,) = project(s.state).output
    assert isinstance(call, FunctionCall)
    assert (call.arguments, call.status) == ('{"a', "incomplete")


def test_cancel_from_queued_writes_only_the_cancellation() -> None:
    s = Stream.new(background=True)
    assert tags(s.cancel(reason="user")) == ["response.incomplete"]
    last = _last(s)
    assert isinstance(last, ResponseCancelled)
    assert last.facts == EndFacts(reason="user")
    resp = project(s.state)
    assert (resp.status, resp.error, resp.usage, resp.completed_at) == (
        "cancelled",
        None,
        None,
        None,
    )


def test_cancel_mid_summary_closes_the_summary_part_and_item() -> None:
    s = Stream.new()
    s.emit(SummaryDelta(text="half a th"))
    new = s.cancel(reason="client_disconnected", usage=TokenUsage(input_tokens=1, output_tokens=4))
    assert tags(new) == [
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    (item,) = project(s.state).output
    assert isinstance(item, ReasoningItem)
    assert item.status == "incomplete"
    assert item.summary == [SummaryText(text="half a th")]
    usage = project(s.state).usage
    assert usage is not None
    assert usage.total_tokens == 5


# --- projection and replay over every scenario ------------------------------------------------


@pytest.mark.parametrize("name", SCENARIOS)
def test_replay_of_all_events_is_the_state_the_commands_returned(name: str) -> None:
    s = SCENARIOS[name]()
    assert replay(s.events) == s.state
    assert [e.sequence_number for e in s.events] == list(range(len(s.events)))
    assert s.state.version == len(s.events) - 1


@pytest.mark.parametrize("name", SCENARIOS)
def test_replay_can_resume_from_any_prefix(name: str) -> None:
    s = SCENARIOS[name]()
    for cut in range(len(s.events) + 1):
        assert replay(s.events[cut:], replay(s.events[:cut])) == s.state


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_intermediate_projection_is_an_openai_response(name: str) -> None:
    s = SCENARIOS[name]()
    state = ResponseState()
    for event in s.events:
        state = evolve(state, event)
        model = sdk_response(project(state))
        assert model.id == RESPONSE_ID
        assert model.status == state.status


@pytest.mark.parametrize("name", SCENARIOS)
def test_lifecycle_snapshots_equal_the_fold_up_to_them(name: str) -> None:
    s = SCENARIOS[name]()
    for i, event in enumerate(s.events):
        if isinstance(event, LifecycleEvent):
            assert event.response == project(replay(s.events[: i + 1]))


def test_the_sdk_reads_the_text_of_a_completed_projection() -> None:
    model = sdk_response(project(SCENARIOS["rich_completed"]().state))
    assert model.output_text == "Let me check.It is sunny."
    assert [o.type for o in model.output] == ["reasoning", "message", "function_call", "message"]
    assert model.usage is not None
    assert model.usage.input_tokens_details.cached_tokens == 8
    assert model.usage.output_tokens_details.reasoning_tokens == 12


# --- logs the commands could never have written ---------------------------------------------


def _renumbered(events: list[AnyEvent]) -> list[AnyEvent]:
    return [replace(e, sequence_number=i) for i, e in enumerate(events)]


def _without(events: list[AnyEvent], kind: type[AnyEvent], nth: int = 0) -> list[AnyEvent]:
    hits = [i for i, e in enumerate(events) if isinstance(e, kind)]
    return _renumbered(events[: hits[nth]] + events[hits[nth] + 1 :])


def _doubled(events: list[AnyEvent], kind: type[AnyEvent]) -> list[AnyEvent]:
    i = next(i for i, e in enumerate(events) if isinstance(e, kind))
    return _renumbered(events[: i + 1] + events[i:])


def _last_snapshot(events: list[AnyEvent], **changes: object) -> list[AnyEvent]:
    last = events[-1]
    return [*events[:-1], replace(last, response=replace(last.response, **changes))]  # type: ignore[union-attr]


def _impossible_logs() -> dict[str, Callable[[], tuple[list[AnyEvent], str]]]:
    def background_without_queued() -> tuple[list[AnyEvent], str]:
        s = Stream.new(background=True)
        s.cancel()
        return _without(list(s.events), ResponseQueued), "followed by response.queued"

    def foreground_failed_without_in_progress() -> tuple[list[AnyEvent], str]:
        s = Stream.new()
        s.fail()
        return _without(list(s.events), ResponseInProgress), "followed by response.in_progress"

    def part_done_without_its_text_done() -> tuple[list[AnyEvent], str]:
        s = Stream.new()
        s.emit(TextDelta(text="hi"))
        s.finish()
        return _without(list(s.events), OutputTextDone), "was not sent first"

    def text_done_twice() -> tuple[list[AnyEvent], str]:
        s = Stream.new()
        s.emit(TextDelta(text="hi"))
        s.finish()
        return _doubled(list(s.events), OutputTextDone), "already sent"

    def call_done_without_its_arguments_done() -> tuple[list[AnyEvent], str]:
        s = Stream.new()
        s.emit(FunctionCallStart(name="f"), ArgumentsDelta(text="{}"))
        s.finish()
        return _without(list(s.events), FunctionCallArgumentsDone), "was not sent first"

    def summary_done_without_its_text_done() -> tuple[list[AnyEvent], str]:
        s = Stream.new()
        s.emit(SummaryDelta(text="gist"))
        s.finish()
        return _without(list(s.events), ReasoningSummaryTextDone), "was not sent first"

    def completed_without_completed_at() -> tuple[list[AnyEvent], str]:
        s = Stream.new()
        s.finish()
        return _last_snapshot(list(s.events), completed_at=None), "completed_at"

    def failed_with_completed_at() -> tuple[list[AnyEvent], str]:
        s = Stream.new()
        s.fail()
        return _last_snapshot(list(s.events), completed_at=NOW), "completed_at"

    def created_with_an_error() -> tuple[list[AnyEvent], str]:
        s = Stream.new()
        first = s.events[0]
        assert isinstance(first, ResponseCreated)
        bad = replace(first.response, error=ResponseError(code="server_error", message="x"))
        return [replace(first, response=bad), *s.events[1:]], "no output"

    return {f.__name__: f for f in locals().values() if callable(f)}


IMPOSSIBLE = _impossible_logs()


@pytest.mark.parametrize("case", IMPOSSIBLE)
def test_replay_refuses_a_log_the_commands_could_not_have_written(case: str) -> None:
    events, why = IMPOSSIBLE[case]()
    with pytest.raises(InvalidTransition, match=why):
        replay(events)
