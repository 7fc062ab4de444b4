"""A `History` made turn by turn (service/prompts/chains.py keeps them) is, to every stage
that reads every turn, the same history as a plain list of its turns: what each stage
carries along the chain (`History.running`) gives what a walk of the turns gives, whichever
turns asked it on the way."""

from __future__ import annotations

import operator
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from adapters.engines.scripted import ScriptedEngine, _prompt_words
from adapters.sealing import AesGcmSealer
from domain.compaction import from_last_compaction
from domain.errors import InvalidRequest
from domain.generation import History, Turn, any_turn
from domain.objects import (
    CompactionItem,
    FunctionCall,
    FunctionCallOutput,
    InputCompaction,
    InputFunctionCall,
    InputImage,
    InputItem,
    InputMessage,
    InputReasoning,
    InputText,
    McpCall,
    McpListTools,
    OutputItem,
    OutputMessage,
    OutputText,
    ReasoningText,
)
from service.prompts.checks import check_calls
from service.prompts.engine import _linear, engine_prompt
from service.prompts.window import _bound
from service.reasoning.sealing import SealedReasoning
from tests.fakes.prompts import make_prompt

SEALER = AesGcmSealer([os.urandom(32)])
BLOB = SEALER.seal([], [ReasoningText(text="kept apart")], source="resp_x")
CALLS = ["c0", "c1", "c2", "c3"]

inputs: st.SearchStrategy[InputItem] = st.one_of(
    st.builds(
        lambda t: InputMessage(id="", role="user", content=[InputText(text=t)]),
        st.sampled_from(["a b", "c", "d e f", ""]),
    ),
    st.builds(
        lambda c: InputFunctionCall(id=f"fc_{c}", call_id=c, name="f", arguments="{}"),
        st.sampled_from(CALLS),
    ),
    st.builds(
        lambda c: FunctionCallOutput(id=f"out_{c}", call_id=c, output="sun and rain"),
        st.sampled_from(CALLS),
    ),
    st.just(
        InputMessage(
            id="", role="user", content=[InputText(text="see"), InputImage(image_url="x:y")]
        )
    ),
    st.just(InputReasoning(id="rs_sealed", encrypted_content=BLOB)),
    st.just(InputReasoning(id="rs_open", content=[ReasoningText(text="open")])),
    st.just(InputCompaction(id="cmp_1", encrypted_content=BLOB)),
    st.just(McpCall(id="mcp_in", server_label="s", name="n", arguments="{}", status="completed")),
)
outputs: st.SearchStrategy[OutputItem] = st.one_of(
    st.builds(
        lambda t: OutputMessage(id="msg", status="completed", content=[OutputText(text=t)]),
        st.sampled_from(["yes", "no then", ""]),
    ),
    st.builds(
        lambda c: FunctionCall(id=f"fc_{c}", call_id=c, name="f", arguments="{}"),
        st.sampled_from(CALLS),
    ),
    st.just(CompactionItem(id="cmp_2", encrypted_content=BLOB)),
    st.just(McpCall(id="mcp", server_label="s", name="n", arguments="{}", status="completed")),
    st.just(McpListTools(id="mcpl", server_label="s")),
)
turns = st.builds(
    lambda k, i, o, instructions: Turn(
        response_id=f"resp_{k}", instructions=instructions, input=i, output=o
    ),
    st.integers(0, 99),
    st.lists(inputs, max_size=3),
    st.lists(outputs, max_size=3),
    st.sampled_from([None, "be brief", "one two three"]),
)


def made_turn_by_turn(chain: list[Turn], asked: set[int]) -> list[History]:
    """The histories of `chain`'s prefixes, each made from the one before; those at
    `asked` are asked every carried figure as they are made (the rest never are)."""
    made: list[History] = []
    for k, turn in enumerate(chain):
        history = History(made[-1] if made else [], turn)
        if k in asked:
            _ask(history)
        made.append(history)
    return made


def _ask(history: list[Turn]) -> None:
    from_last_compaction(history)
    engine_prompt(make_prompt(history=history))
    _prompt_words(make_prompt(history=history))
    _bound(make_prompt(history=history))
    SealedReasoning(ScriptedEngine(), SEALER)._opened(make_prompt(history=history))


@settings(max_examples=150, deadline=None)
@given(
    chain=st.lists(turns, min_size=1, max_size=8),
    asked=st.sets(st.integers(0, 7)),
    items=st.lists(inputs, max_size=3),
)
def test_every_stage_reads_a_history_made_turn_by_turn_as_its_plain_list(
    chain: list[Turn], asked: set[int], items: list[InputItem]
) -> None:
    for history in made_turn_by_turn(chain, asked):
        plain = list(history)
        assert history == plain
        assert from_last_compaction(history) == from_last_compaction(plain)
        for given_items in (items, [InputMessage(id="", role="user", content=[])]):
            ours, theirs = (make_prompt(given_items, history=h) for h in (history, plain))
            assert engine_prompt(ours) == engine_prompt(theirs)
            assert _prompt_words(ours) == _prompt_words(theirs)
            engine = SealedReasoning(ScriptedEngine(), SEALER)
            opened = engine._opened(ours)
            assert opened == engine._opened(theirs)
            # What every turn is when each is opened and shown as an engine is given it.
            assert opened.history == [replace(t, input=engine._items(t.input)) for t in plain]
            assert engine_prompt(ours).history == [_linear(t) for t in plain]
            assert _bound(ours) == _bound(theirs)
        assert _refusal(history, items) == _refusal(plain, items) == _every_call(plain, items)
        words = history.running("test.words", lambda t: len(t.input) + len(t.output), operator.add)
        assert words == sum(len(t.input) + len(t.output) for t in plain)
        assert any_turn(history, "test.any", lambda t: not t.output) == any(
            not t.output for t in plain
        )


def _refusal(history: list[Turn], items: list[InputItem]) -> str | None:
    try:
        check_calls(history, items)
    except InvalidRequest as exc:
        return str(exc)
    return None


def _every_call(history: list[Turn], items: list[InputItem]) -> str | None:
    """The refusal a check of every call the conversation holds makes."""
    calls = {
        i.call_id
        for i in [*(x for t in history for x in [*t.input, *t.output]), *items]
        if isinstance(i, InputFunctionCall | FunctionCall)
    }
    for item in items:
        if isinstance(item, FunctionCallOutput) and item.call_id not in calls:
            return f"No tool call found for function call output with call_id {item.call_id}."
    return None


def test_a_tool_output_answers_a_call_of_any_earlier_turn_and_an_orphan_is_refused() -> None:
    call = Turn(
        response_id="resp_1",
        instructions=None,
        input=[],
        output=[FunctionCall(id="fc", call_id="old", name="f", arguments="{}")],
    )
    plain = Turn(response_id="resp_2", instructions=None, input=[], output=[])
    history = History(History([], call), plain)
    check_calls(history, [FunctionCallOutput(id="o", call_id="old", output="x")])
    with pytest.raises(InvalidRequest, match="call_id new"):
        check_calls(history, [FunctionCallOutput(id="o", call_id="new", output="x")])
