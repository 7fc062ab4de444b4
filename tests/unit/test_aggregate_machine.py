"""A hypothesis state machine over the response aggregate: random engines drive the commands;
after every step the log must replay to the state, stay dense and OpenAI-shaped, and end at
most once; commands the lifecycle forbids, and forged events, must be refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import msgspec
from hypothesis import event, note, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from domain.builder.emit import emit
from domain.builder.finish import finish, to_usage
from domain.commands import cancel, create, fail, start
from domain.errors import InvalidTransition
from domain.events import (
    AnyEvent,
    ContentPartAdded,
    ContentPartDone,
    EndFacts,
    FunctionCallArgumentsDone,
    LifecycleEvent,
    OutputItemAdded,
    OutputItemDone,
    OutputRefusalDone,
    OutputTextDone,
    ReasoningSummaryPartAdded,
    ReasoningSummaryPartDone,
    ReasoningSummaryTextDone,
    ReasoningTextDone,
    ResponseCreated,
    ResponseFailed,
    ResponseIncomplete,
    TerminalEvent,
    encode,
    tag_of,
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
    OutputItem,
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningText,
    Refusal,
    phase_of,
)
from domain.state import Decision, ResponseState
from tests.unit.domain_helpers import (
    NOW,
    SUFFIX,
    make_facts,
    make_response,
    roundtrip,
    sdk_response,
    sdk_stream_event,
)

replace = msgspec.structs.replace

# Short text, often empty, with characters JSON has to escape.
texts = st.text(alphabet=st.sampled_from('ab é😀"\\\n{}'), max_size=6)
phases = st.sampled_from([None, "commentary", "final_answer"])
usages = st.builds(
    TokenUsage,
    input_tokens=st.integers(0, 10_000),
    cached_tokens=st.integers(0, 100),
    output_tokens=st.integers(0, 10_000),
    reasoning_tokens=st.integers(0, 100),
)
STOP = Finished(reason="stop", usage=TokenUsage())
STATE_COMMANDS: dict[str, Callable[[ResponseState], Decision]] = {
    "start": start,
    "emit": lambda s: emit(s, TextDelta(text="x")),
    "finish": lambda s: finish(s, STOP, now=NOW),
    "fail": lambda s: fail(s, code="server_error", message="m", reason="r"),
    "cancel": lambda s: cancel(s, reason="r"),
}
PREFIX = {OutputMessage: "msg", ReasoningItem: "rs", FunctionCall: "fc"}


# --- forgeries: changes to a legal next event that `evolve` must always refuse ---------------


def _grown(part: Any) -> Any:
    if isinstance(part, Refusal):
        return replace(part, refusal=part.refusal + "x")
    return replace(part, text=part.text + "x")


def _grown_item(item: OutputItem) -> OutputItem:
    if isinstance(item, OutputMessage):
        return replace(item, content=[*item.content, OutputText(text="x")])
    if isinstance(item, ReasoningItem):
        return replace(item, content=[*item.content, ReasoningText(text="x")])
    return replace(item, arguments=item.arguments + "x")


def forgeries(e: Any) -> dict[str, AnyEvent]:
    out: dict[str, AnyEvent] = {"gap": replace(e, sequence_number=e.sequence_number + 1)}
    if e.sequence_number > 0:
        out["behind"] = replace(e, sequence_number=e.sequence_number - 1)
    for field in ("output_index", "content_index", "summary_index"):
        if hasattr(e, field):
            out[field] = replace(e, **{field: getattr(e, field) + 1})
    if hasattr(e, "item_id"):
        out["item_id"] = replace(e, item_id=e.item_id + "x")
    if isinstance(e, OutputTextDone | ReasoningTextDone | ReasoningSummaryTextDone):
        out["done_text"] = replace(e, text=e.text + "x")
    if isinstance(e, OutputRefusalDone):
        out["done_text"] = replace(e, refusal=e.refusal + "x")
    if isinstance(e, FunctionCallArgumentsDone):
        out["done_text"] = replace(e, arguments=e.arguments + "x")
        out["done_name"] = replace(e, name=e.name + "x")
    if isinstance(
        e, ContentPartAdded | ContentPartDone | ReasoningSummaryPartAdded | ReasoningSummaryPartDone
    ):
        out["part"] = replace(e, part=_grown(e.part))
    if isinstance(e, OutputItemAdded):
        out["item_not_empty"] = replace(e, item=_grown_item(e.item))
        out["item_status"] = replace(e, item=replace(e.item, status="completed"))
    if isinstance(e, OutputItemDone):
        out["item_content"] = replace(e, item=_grown_item(e.item))
        out["item_status"] = replace(e, item=replace(e.item, status="in_progress"))
        out["item_id"] = replace(e, item=replace(e.item, id=f"{e.item.id}x"))
    if hasattr(e, "response"):
        out["snapshot_model"] = replace(e, response=replace(e.response, model="forged"))
        wrong = "queued" if e.response.status != "queued" else "in_progress"
        out["snapshot_status"] = replace(e, response=replace(e.response, status=wrong))
        out["snapshot_output"] = replace(
            e,
            response=replace(
                e.response,
                output=[*e.response.output, FunctionCall(call_id="x", name="x", arguments="")],
            ),
        )
    if isinstance(e, ResponseFailed):
        out["failed_without_error"] = replace(e, response=replace(e.response, error=None))
    if isinstance(e, ResponseIncomplete):
        out["incomplete_without_why"] = replace(
            e, response=replace(e.response, incomplete_details=None)
        )
    return out


class _Next:
    """A command that is legal in some states, for the forgery rule."""

    def __init__(
        self, run: Callable[[ResponseState], Decision], applies: Callable[..., bool]
    ) -> None:
        self.run, self.applies = run, applies

    def __call__(self, state: ResponseState) -> Decision:
        return self.run(state)


def _running(s: ResponseState) -> bool:
    return s.status == "in_progress"


def _open_call(s: ResponseState) -> bool:
    return (
        _running(s)
        and s.open_index is not None
        and s.response is not None
        and isinstance(s.response.output[s.open_index], FunctionCall)
    )


NEXT_COMMANDS: dict[str, _Next] = {
    "start": _Next(start, lambda s: s.status == "queued"),
    "fail": _Next(STATE_COMMANDS["fail"], lambda s: not s.terminal),
    "cancel": _Next(STATE_COMMANDS["cancel"], lambda s: not s.terminal),
    "stop": _Next(STATE_COMMANDS["finish"], _running),
    "length": _Next(lambda s: finish(s, replace(STOP, reason="length"), now=NOW), _running),
    "text": _Next(lambda s: emit(s, TextDelta(text="t", phase="final_answer")), _running),
    "commentary": _Next(lambda s: emit(s, TextDelta(text="c", phase="commentary")), _running),
    "refusal": _Next(lambda s: emit(s, RefusalDelta(text="r")), _running),
    "reasoning": _Next(lambda s: emit(s, ReasoningDelta(text="r")), _running),
    "summary": _Next(lambda s: emit(s, SummaryDelta(text="s")), _running),
    "call": _Next(lambda s: emit(s, FunctionCallStart(name="f")), _running),
    "end_item": _Next(
        lambda s: emit(s, EndItem()), lambda s: _running(s) and s.open_index is not None
    ),
    "arguments": _Next(lambda s: emit(s, ArgumentsDelta(text="a")), _open_call),
}


class ResponseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[AnyEvent] = []
        self.state = ResponseState()
        self.checked = 0  # events already checked one by one
        self.folded = ResponseState()
        # What the engine said, per kind, for the "nothing lost" check.
        self.said = {"text": "", "refusal": "", "reasoning": "", "summary": "", "arguments": ""}
        self.ended_at: int | None = None
        self.patience = 0  # the log length before which the response may not end

    # --- helpers ------------------------------------------------------------------------------

    def _apply(self, decision: Decision) -> list[AnyEvent]:
        note(f"  -> {[tag_of(type(e)) for e in decision.events]}")
        was = self.state.status
        self.events.extend(decision.events)
        self.state = decision.state
        if self.state.terminal and self.ended_at is None:
            self.ended_at = len(self.events)
            items = len(project(self.state).output)
            event(f"ended: {was} -> {self.state.status}")
            event(f"ended with {min(items, 5)}{'+' if items >= 5 else ''} output items")
        return list(decision.events)

    def _open(self) -> OutputItem | None:
        i = self.state.open_index
        return None if i is None or self.state.response is None else self.state.response.output[i]

    def _open_part(self) -> object:
        item, c = self._open(), self.state.open_part
        if isinstance(item, OutputMessage | ReasoningItem) and c is not None:
            return item.content[c]
        return None

    def _emit(self, delta: AnyDelta, kind: str, text: str, continues: bool) -> None:
        """Emit `delta`; `continues`: it extends the open part, so it is one delta event."""
        new = self._apply(emit(self.state, delta))
        if not text:
            assert new == [], "an empty delta must produce no event"
            return
        self.said[kind] += text
        if continues:
            assert len(new) == 1, "more of the same text is one delta event"

    def _refused(self, command: Callable[[ResponseState], object]) -> None:
        before, count = self.state, len(self.events)
        try:
            command(self.state)
        except InvalidTransition:
            pass
        else:
            raise AssertionError(f"a {self.state.status} response accepted it")
        assert self.state == before
        assert len(self.events) == count

    def _end(self, decision: Decision, items: str) -> None:
        """Apply a terminal decision; the item that was open must end `items`."""
        i = self.state.open_index
        self._apply(decision)
        resp = project(self.state)
        if i is not None:
            assert resp.output[i].status == items
        assert all(item.status in ("completed", "incomplete") for item in resp.output)

    @property
    def running(self) -> bool:
        return self.state.status == "in_progress"

    @property
    def live(self) -> bool:
        return self.state.status in ("queued", "in_progress")

    @property
    def may_end(self) -> bool:
        return len(self.events) >= self.patience

    # --- legal commands ---------------------------------------------------------------------

    # `patience` spreads the endings over short and long logs; without it most runs end at once.
    @initialize(background=st.booleans(), patience=st.just(0) | st.integers(1, 30))
    def create(self, background: bool, patience: int) -> None:
        note(f"create(background={background}), patience {patience}")
        self.patience = patience
        self._apply(create(make_response(background=background), make_facts()))

    @precondition(lambda self: self.state.status == "queued")
    @rule()
    def start(self) -> None:
        note("start")
        self._apply(start(self.state))

    @precondition(lambda self: self.running)
    @rule(text=texts, phase=phases)
    def text(self, text: str, phase: Any) -> None:
        note(f"text({text!r}, {phase})")
        item = self._open()
        same = isinstance(item, OutputMessage) and phase_of(item) == phase
        continues = same and isinstance(self._open_part(), OutputText)
        self._emit(TextDelta(text=text, phase=phase), "text", text, continues)
        if text:
            item = self._open()
            assert isinstance(item, OutputMessage)
            assert phase_of(item) == phase

    @precondition(lambda self: self.running)
    @rule(text=texts)
    def refusal(self, text: str) -> None:
        note(f"refusal({text!r})")
        before = self._open()
        continues = isinstance(self._open_part(), Refusal)
        self._emit(RefusalDelta(text=text), "refusal", text, continues)
        if text:
            item = self._open()
            assert isinstance(item, OutputMessage)
            if isinstance(before, OutputMessage):
                assert item.id == before.id, "a refusal joins the open message"

    @precondition(lambda self: self.running)
    @rule(text=texts)
    def reasoning(self, text: str) -> None:
        note(f"reasoning({text!r})")
        continues = isinstance(self._open_part(), ReasoningText)
        self._emit(ReasoningDelta(text=text), "reasoning", text, continues)
        if text:
            assert isinstance(self._open(), ReasoningItem)

    @precondition(lambda self: self.running)
    @rule(text=texts)
    def summary(self, text: str) -> None:
        note(f"summary({text!r})")
        continues = isinstance(self._open(), ReasoningItem) and self.state.open_summary is not None
        self._emit(SummaryDelta(text=text), "summary", text, continues)
        if text:
            assert isinstance(self._open(), ReasoningItem)
            assert self.state.open_summary is not None

    @precondition(lambda self: self.running)
    @rule(name=st.sampled_from(["get_weather", "search"]), call_id=st.none() | st.just("call_x"))
    def call_start(self, name: str, call_id: str | None) -> None:
        note(f"call_start({name}, {call_id})")
        new = self._apply(emit(self.state, FunctionCallStart(name=name, call_id=call_id)))
        assert isinstance(new[-1], OutputItemAdded)
        item = self._open()
        assert isinstance(item, FunctionCall)
        n = len(project(self.state).output) - 1
        assert (item.name, item.arguments) == (name, "")
        assert item.call_id == (call_id or f"call_{SUFFIX}_{n}")

    @precondition(lambda self: self.running and isinstance(self._open(), FunctionCall))
    @rule(text=texts)
    def arguments(self, text: str) -> None:
        note(f"arguments({text!r})")
        self._emit(ArgumentsDelta(text=text), "arguments", text, continues=True)

    @precondition(lambda self: self.running)
    @rule()
    def end_item(self) -> None:
        note("end_item")
        i = self.state.open_index
        new = self._apply(emit(self.state, EndItem()))
        assert self.state.open_index is None
        assert bool(new) == (i is not None)
        if i is not None:
            assert project(self.state).output[i].status == "completed"

    @precondition(lambda self: self.running and self.may_end)
    @rule(usage=usages)
    def finish_stop(self, usage: TokenUsage) -> None:
        self.finish("stop", usage)

    @precondition(lambda self: self.running and self.may_end)
    @rule(reason=st.sampled_from(["length", "content_filter"]), usage=usages)
    def finish(self, reason: FinishReason, usage: TokenUsage) -> None:
        note(f"finish({reason})")
        finished = Finished(reason=reason, usage=usage)
        items = "completed" if reason == "stop" else "incomplete"
        self._end(finish(self.state, finished, now=NOW), items)
        resp = project(self.state)
        assert resp.status == ("completed" if reason == "stop" else "incomplete")
        assert resp.completed_at == (NOW if reason == "stop" else None)
        assert resp.usage == to_usage(usage)
        assert resp.usage.total_tokens == usage.input_tokens + usage.output_tokens
        assert resp.usage.input_tokens_details.cached_tokens == usage.cached_tokens
        assert resp.usage.output_tokens_details.reasoning_tokens == usage.reasoning_tokens
        last = self.events[-1]
        if reason == "stop":
            assert resp.incomplete_details is None
        else:
            why = "max_output_tokens" if reason == "length" else "content_filter"
            assert resp.incomplete_details is not None
            assert resp.incomplete_details.reason == why
            assert isinstance(last, ResponseIncomplete)
            assert last.facts == EndFacts(reason=why)

    @precondition(lambda self: self.live and self.may_end)
    @rule(usage=st.none() | usages, detail=st.none() | st.just("host-7 lost its lease"))
    def fail(self, usage: TokenUsage | None, detail: str | None) -> None:
        note(f"fail from {self.state.status}")
        decision = fail(
            self.state, code="server_error", message="m", reason="r", detail=detail, usage=usage
        )
        self._end(decision, "incomplete")
        resp = project(self.state)
        assert (resp.status, resp.completed_at) == ("failed", None)
        assert resp.error is not None
        assert (resp.error.code, resp.error.message) == ("server_error", "m")
        assert resp.usage == (to_usage(usage) if usage else None)
        last = self.events[-1]
        assert isinstance(last, ResponseFailed)
        assert last.facts == EndFacts(reason="r", detail=detail)

    @precondition(lambda self: self.live and self.may_end)
    @rule(usage=st.none() | usages)
    def cancel(self, usage: TokenUsage | None) -> None:
        note(f"cancel from {self.state.status}")
        self._end(cancel(self.state, reason="user", usage=usage), "incomplete")
        resp = project(self.state)
        assert (resp.status, resp.completed_at, resp.error) == ("cancelled", None, None)
        assert resp.usage == (to_usage(usage) if usage else None)

    # --- what must be refused -----------------------------------------------------------------

    @precondition(lambda self: self.state.terminal)
    @rule(command=st.sampled_from(sorted(STATE_COMMANDS)))
    def command_on_terminal(self, command: str) -> None:
        note(f"{command} on {self.state.status} (must raise)")
        self._refused(STATE_COMMANDS[command])

    @precondition(lambda self: self.state.terminal)
    @rule(text=texts)
    def arguments_on_terminal(self, text: str) -> None:
        self._refused(lambda s: emit(s, ArgumentsDelta(text=text)))

    @precondition(lambda self: self.running)
    @rule()
    def start_when_running(self) -> None:
        self._refused(start)

    @precondition(lambda self: self.state.status == "queued")
    @rule(command=st.sampled_from(["emit", "finish"]), text=texts)
    def generate_while_queued(self, command: str, text: str) -> None:
        note(f"{command} while queued (must raise)")
        if command == "emit":
            self._refused(lambda s: emit(s, ReasoningDelta(text=text)))
        else:
            self._refused(STATE_COMMANDS["finish"])

    @precondition(lambda self: self.running and not isinstance(self._open(), FunctionCall))
    @rule(text=texts)
    def arguments_without_a_call(self, text: str) -> None:
        self._refused(lambda s: emit(s, ArgumentsDelta(text=text)))

    @precondition(lambda self: self.running)
    @rule()
    def finished_as_a_delta(self) -> None:
        self._refused(lambda s: emit(s, STOP))

    @rule(data=st.data())
    def an_old_event_at_its_old_position_is_refused(self, data: st.DataObject) -> None:
        old = data.draw(st.sampled_from(self.events))
        self._refused(lambda s: evolve(s, old))

    @rule(data=st.data())
    def an_old_event_moved_to_the_next_position_is_refused(self, data: st.DataObject) -> None:
        """A repeated lifecycle event, or anything at all after the end, is never legal."""
        pool = (
            self.events
            if self.state.terminal
            else [e for e in self.events if isinstance(e, LifecycleEvent)]
        )
        old = data.draw(st.sampled_from(pool))
        moved = replace(old, sequence_number=len(self.events))
        note(f"replaying {tag_of(type(old))} at {moved.sequence_number} (must raise)")
        self._refused(lambda s: evolve(s, moved))

    @precondition(lambda self: self.live)
    @rule(command=st.sampled_from(sorted(NEXT_COMMANDS)))
    def forged_events_are_refused(self, command: str) -> None:
        """Every event of a legal decision, altered in any way no command would, is refused."""
        make = NEXT_COMMANDS[command]
        if not make.applies(self.state):
            return
        at = self.state
        for legal in make(at).events:
            for how, forged in forgeries(legal).items():
                try:
                    evolve(at, forged)
                except InvalidTransition:
                    continue
                raise AssertionError(f"evolve accepted {tag_of(type(legal))} forged by {how}")
            at = evolve(at, legal)  # the event as the command made it is accepted

    # --- invariants -------------------------------------------------------------------------

    @invariant()
    def each_new_event_folds_round_trips_and_is_openai_shaped(self) -> None:
        for e in self.events[self.checked :]:
            self.folded = evolve(self.folded, e)
            assert roundtrip(e) == e
            sdk_stream_event(encode(e).data)
            if isinstance(e, LifecycleEvent):
                # Every snapshot is the fold of the log up to and including it.
                assert e.response == project(self.folded)
            assert isinstance(e, ResponseCreated) == (e.sequence_number == 0)
        self.checked = len(self.events)
        assert self.folded == self.state

    @invariant()
    def replay_of_the_whole_log_is_the_state(self) -> None:
        assert replay(self.events) == self.state
        assert self.state.facts == make_facts()

    @invariant()
    def positions_are_dense(self) -> None:
        assert [e.sequence_number for e in self.events] == list(range(len(self.events)))
        assert self.state.version == len(self.events) - 1

    @invariant()
    def at_most_one_terminal_event_and_it_is_last(self) -> None:
        ends = [i for i, e in enumerate(self.events) if isinstance(e, TerminalEvent)]
        assert len(ends) <= 1
        if ends:
            assert ends == [len(self.events) - 1]
        assert bool(ends) == self.state.terminal

    @invariant()
    def terminal_absorbs(self) -> None:
        if self.ended_at is not None:
            assert self.state.terminal
            assert len(self.events) == self.ended_at
            assert self.state.open_index is None

    @invariant()
    def the_projection_is_an_openai_response(self) -> None:
        model = sdk_response(project(self.state))
        assert model.status == self.state.status

    @invariant()
    def nothing_the_engine_said_is_lost_or_duplicated(self) -> None:
        got = dict.fromkeys(self.said, "")
        for item in project(self.state).output:
            if isinstance(item, OutputMessage):
                for part in item.content:
                    if isinstance(part, OutputText):
                        got["text"] += part.text
                    else:
                        got["refusal"] += part.refusal
            elif isinstance(item, ReasoningItem):
                got["reasoning"] += "".join(p.text for p in item.content)
                got["summary"] += "".join(p.text for p in item.summary)
            else:
                got["arguments"] += item.arguments
        assert got == self.said

    @invariant()
    def items_are_numbered_and_all_but_the_open_one_closed(self) -> None:
        for i, item in enumerate(project(self.state).output):
            assert item.id == f"{PREFIX[type(item)]}_{SUFFIX}_{i}"
            if i == self.state.open_index:
                assert item.status == "in_progress"
            else:
                assert item.status in ("completed", "incomplete")


ResponseMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestResponseMachine = ResponseMachine.TestCase
