"""`domain/truncation.py`: what a cut keeps. Whole turns go first, then input items; a tool
output whose call went with them goes too, wherever it is, so no engine is given an answer
to a call it cannot see."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from domain.generation import Turn
from domain.objects import (
    FunctionCall,
    FunctionCallOutput,
    InputItem,
    InputMessage,
    InputText,
)
from domain.truncation import at, cut, steps


def say(text: str) -> InputMessage:
    return InputMessage(id=f"msg_{text}", role="user", content=[InputText(text=text)])


def turn(rid: str, items: list[InputItem], call: str | None = None) -> Turn:
    output = (
        []
        if call is None
        else [FunctionCall(id=f"fc_{call}", call_id=call, name="f", arguments="{}")]
    )
    return Turn(response_id=rid, instructions=None, input=items, output=output)


def test_an_output_answering_a_call_of_a_dropped_turn_goes_with_it() -> None:
    history = [
        turn("resp_1", [say("first")], call="c1"),
        turn("resp_2", [FunctionCallOutput(id="fco_1", call_id="c1", output="42"), say("more")]),
    ]
    kept = cut(history, [say("now")], 1, 0)
    assert [t.response_id for t in kept.history] == ["resp_2"]
    assert kept.history[0].input == [say("more")]
    assert kept.items == [say("now")]
    # Nothing dropped: the answer stays with its call.
    assert cut(history, [say("now")], 0, 0).history == history


@given(turns=st.integers(0, 4), items=st.integers(1, 4))
def test_every_step_cuts_more_and_never_the_last_item(turns: int, items: int) -> None:
    history = [turn(f"resp_{i}", [say(str(i))]) for i in range(turns)]
    sent: list[InputItem] = [say(f"in{i}") for i in range(items)]
    sizes = []
    for step in range(steps(history, sent) + 1):
        dropped_turns, dropped_items = at(history, step)
        assert dropped_turns + dropped_items == step
        kept = cut(history, sent, dropped_turns, dropped_items)
        assert kept.items[-1] == sent[-1]
        sizes.append(len(kept.history) + len(kept.items))
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] == 1
