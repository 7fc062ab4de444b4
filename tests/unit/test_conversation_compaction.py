"""What a compaction keeps of a request's input (domain/compaction.py `kept_from`), where a
compaction made at create joins its conversation, and where a conversation's next turn
starts (service/prompts/conversation.py `conversation_items`, `since_last_compaction`):
together they must give the next turn what the compacted response's engine was given, as a
`previous_response_id` continuation does, and never a tool output without its call."""

from __future__ import annotations

from typing import Any

import pytest

from domain.compaction import COMPACTION_FACT, kept_from, since_last_compaction
from domain.conversations import ConversationItem
from domain.objects import (
    CompactionItem,
    FunctionCallOutput,
    InputCompaction,
    InputFunctionCall,
    InputItem,
    InputMessage,
    InputText,
    OutputMessage,
    OutputText,
    SetAsideItem,
)
from service.prompts.conversation import conversation_items
from service.wire.set_aside import SET_ASIDE


def said(iid: str, role: Any = "user") -> InputMessage:
    return InputMessage(id=iid, role=role, content=[InputText(text=iid)])


CMP = CompactionItem(id="cmp_1", encrypted_content="rsv1.x")
ANSWER = OutputMessage(id="msg_out", status="completed", content=[OutputText(text="ok")])
ASIDE = {"at": 1, "item": {"id": "ws_1", "type": "web_search_call", "status": "completed"}}


def ids(items: list[ConversationItem]) -> list[str]:
    return [i.id for i in items]


@pytest.mark.parametrize(
    ("kept", "expected"),
    [
        # The engine kept the last user message on: the compaction goes before it.
        (1, ["u1", "ws_1", "a1", "cmp_1", "u2", "msg_out"]),
        # Right before the first kept item (an item set aside is shown to no engine, so
        # where it stands beside the compaction changes no prompt).
        (2, ["u1", "ws_1", "cmp_1", "a1", "u2", "msg_out"]),
        # Codex's trigger keeps nothing: the compaction follows the whole input.
        (0, ["u1", "ws_1", "a1", "u2", "cmp_1", "msg_out"]),
    ],
)
def test_a_compaction_joins_its_conversation_before_the_input_it_kept(
    kept: int, expected: list[str]
) -> None:
    asked: list[InputItem] = [said("u1"), said("a1", "assistant"), said("u2")]
    extra = {SET_ASIDE: [ASIDE], COMPACTION_FACT: {"kept_items": kept, "item": {}}}
    given = conversation_items(asked, extra, [CMP, ANSWER])
    assert ids(given) == expected
    assert isinstance(given[expected.index("cmp_1")], InputCompaction)
    assert isinstance(given[1], SetAsideItem)


def test_without_a_compaction_fact_the_items_keep_their_order() -> None:
    asked: list[InputItem] = [said("u1")]
    assert ids(conversation_items(asked, {}, [ANSWER])) == ["u1", "msg_out"]


def test_a_conversations_next_turn_starts_at_its_last_compaction() -> None:
    first = InputCompaction(id="cmp_a", encrypted_content="rsv1.a")
    last = InputCompaction(id="cmp_b", encrypted_content="rsv1.b")
    items: list[InputItem] = [said("u1"), first, said("u2"), last, said("u3")]
    assert [i.id for i in since_last_compaction(items)] == ["cmp_b", "u3"]
    plain: list[InputItem] = [said("u1"), said("u2")]
    assert since_last_compaction(plain) == plain


def call(cid: str) -> InputFunctionCall:
    return InputFunctionCall(id=f"fc_{cid}", call_id=cid, name="f", arguments="{}")


def output(cid: str) -> FunctionCallOutput:
    return FunctionCallOutput(id=f"fco_{cid}", call_id=cid, output="42")


@pytest.mark.parametrize(
    ("items", "first_kept"),
    [
        # From the last user message on.
        ([said("u1"), said("a1", "assistant"), said("u2")], 2),
        # No user message: all of it.
        ([said("a1", "assistant"), said("a2", "assistant")], 0),
        # A call and its output after the user message are kept together.
        ([said("u1"), call("x"), output("x")], 0),
        # A tool loop's step: the output of a call the summary replaced is not kept.
        ([output("x")], 1),
        ([said("u1"), output("x"), said("a1", "assistant")], 2),
        # Dropping an orphan drops the calls before it, so their outputs go too.
        ([said("u1"), call("y"), output("x"), output("y")], 4),
    ],
)
def test_a_compaction_keeps_no_tool_output_without_its_call(
    items: list[InputItem], first_kept: int
) -> None:
    assert kept_from(items) == first_kept
