"""`POST /v1/responses/compact` end to end with the official SDK: the summary is written by a
response of its own (in the log, retrievable), the compaction item carries it sealed, and a
later request that passes the item gives the engine the summary in place of the turns."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import openai
import pytest

from tests.e2e.conftest import RESPLOG, Server
from tests.e2e.test_websocket import final_text, turn

TRANSCRIPT = {"scripted_mode": "transcript"}


def test_a_compacted_conversation_continues_from_its_summary(
    client: openai.OpenAI, server: Server
) -> None:
    one = client.responses.create(model="scripted", input="My name is Ada.")
    two = client.responses.create(
        model="scripted", input="I like tea.", previous_response_id=one.id
    )
    compacted = client.responses.compact(
        model="scripted", previous_response_id=two.id, input="And biscuits."
    )
    assert compacted.object == "response.compaction"
    kinds = [getattr(i, "type", None) for i in compacted.output]
    assert kinds == ["message", "message", "message", "compaction"]
    item: Any = compacted.output[-1]
    assert item.id == "cmp_" + compacted.id.removeprefix("resp_")
    assert item.encrypted_content.startswith("rsv1.")
    # The summary is a response of the log: what was summarised, and into what.
    summarising = client.responses.retrieve(compacted.id)
    assert summarising.metadata == {"resplog_compaction": "1"}
    assert summarising.previous_response_id == two.id
    assert "My name is Ada." in summarising.output_text
    assert compacted.usage is not None and compacted.usage.output_tokens > 0
    # Continue from the compacted list alone: the engine is given the summary.
    passed: Any = [
        {"type": "compaction", "id": item.id, "encrypted_content": item.encrypted_content},
        {"role": "user", "content": "What do I like?"},
    ]
    later = client.responses.create(model="scripted", input=passed, metadata=TRANSCRIPT)
    assert "Summary of the conversation before this point:" in later.output_text
    assert "I like tea." in later.output_text
    assert [i.type for i in client.responses.input_items.list(later.id).data][-1] == "compaction"
    shown = conversation_view(server, later.id)
    assert f"compaction: earlier turns replaced by the summary {compacted.id} wrote" in shown


WEATHER: Any = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


def compact_two_turns(client: openai.OpenAI) -> Any:
    """A compaction of a tool round (a call, its output, the answer) and one more message."""
    one = client.responses.create(model="scripted", input="My name is Ada.", tools=WEATHER)
    call: Any = one.output[-1]
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    two = client.responses.create(
        model="scripted", input=[output], previous_response_id=one.id, tools=WEATHER
    )
    return client.responses.compact(
        model="scripted", previous_response_id=two.id, input="I like tea."
    )


def as_sent(compacted: Any) -> list[Any]:
    """The output items as the server sent them (the SDK types a user message as an
    assistant's, and warns when it dumps one)."""
    return [item.to_dict(warnings=False) for item in compacted.output]


def test_a_compaction_output_sent_back_as_the_next_input_is_accepted(
    client: openai.OpenAI,
) -> None:
    """OpenAI's guide: the compacted output, as it came, is the next request's input. Its
    user messages carry the ids they were recorded under; none is empty."""
    compacted = compact_two_turns(client)
    assert [i.type for i in compacted.output] == ["message", "message", "compaction"]
    users: Any = compacted.output[:-1]
    assert [m.role for m in users] == ["user", "user"] and all(m.id for m in users), users
    assert users[-1].id == "msg_" + compacted.id.removeprefix("resp_") + "_in0"
    later = client.responses.create(
        model="scripted",
        input=[*as_sent(compacted), {"role": "user", "content": "What do I like?"}],
        metadata=TRANSCRIPT,
    )
    assert later.status == "completed" and "I like tea." in later.output_text


def test_a_compaction_output_sent_back_over_a_websocket_is_accepted(
    client: openai.OpenAI,
) -> None:
    compacted = compact_two_turns(client)
    passed = as_sent(compacted)
    with client.responses.connect() as conn:
        events = turn(
            conn,
            model="scripted",
            store=False,
            input=[*passed, {"role": "user", "content": "What do I like?"}],
            metadata=TRANSCRIPT,
        )
    assert events[-1]["type"] == "response.completed", events[-1]
    assert "I like tea." in final_text(events)


def test_bad_compactions_are_openai_400s_and_write_nothing(
    client: openai.OpenAI, server: Server
) -> None:
    before = server.count_rows("responses")
    with pytest.raises(openai.BadRequestError) as missing:
        client.post("/responses/compact", body={"input": "x"}, cast_to=object)
    assert missing.value.code == "missing_required_parameter"
    with pytest.raises(openai.BadRequestError) as unknown:
        client.responses.compact(model="scripted", input="x", extra_body={"tools": []})
    assert unknown.value.code == "unknown_parameter"
    forged: Any = [{"type": "compaction", "encrypted_content": "rsv1.AAAA"}]
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="scripted", input=forged)
    assert bad.value.code == "invalid_encrypted_content"
    assert server.count_rows("responses") == before


def test_codex_compaction_trigger_answers_one_compaction_item(client: openai.OpenAI) -> None:
    """Codex CLI compacts with an ordinary streamed, `store: false` create whose input ends
    in `{"type": "compaction_trigger"}`; its one output item is the compaction, and passed
    back as input it gives the engine the summary."""
    conversation: Any = [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Hello Ada."},
        {"role": "user", "content": "I like tea."},
    ]
    events = list(
        client.responses.create(
            model="scripted",
            input=[*conversation, {"type": "compaction_trigger"}],
            store=False,
            stream=True,
            instructions="Be brief.",
        )
    )
    kinds = [e.type for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    final: Any = events[-1].response  # type: ignore[union-attr]
    (item,) = final.output
    assert item.type == "compaction" and item.encrypted_content.startswith("rsv1.")
    summarising = client.responses.retrieve("resp_" + item.id.removeprefix("cmp_"))
    assert summarising.metadata == {"resplog_compaction": "1"}
    assert "I like tea." in summarising.output_text  # the scripted summary echoes the input
    assert final.usage.output_tokens == summarising.usage.output_tokens  # type: ignore[union-attr]
    passed: Any = [item.model_dump(exclude_none=True), {"role": "user", "content": "And me?"}]
    later = client.responses.create(model="scripted", input=passed, metadata=TRANSCRIPT)
    assert later.output_text.startswith("developer: Summary of the conversation before this")
    assert "My name is Ada." in later.output_text


def test_context_management_compacts_a_conversation_over_its_threshold(
    client: openai.OpenAI, server: Server
) -> None:
    """Over `compact_threshold` (the scripted engine counts words), the create first has the
    conversation summarised, its output opens with the compaction item, and the engine is
    given the summary and the new message alone; the next turn continues from there."""
    one = client.responses.create(model="scripted", input="alpha beta gamma delta epsilon")
    two = client.responses.create(
        model="scripted", input="zeta eta theta iota kappa", previous_response_id=one.id
    )
    management: Any = [{"type": "compaction", "compact_threshold": 20}]
    under = client.responses.create(
        model="scripted",
        input="lambda",
        previous_response_id=one.id,
        context_management=management,  # 5 + 7 + 1 words: under the threshold
    )
    assert [i.type for i in under.output] == ["reasoning", "message"]
    three = client.responses.create(
        model="scripted",
        input="what now?",
        previous_response_id=two.id,
        context_management=management,
        metadata=TRANSCRIPT,
    )
    kinds = [i.type for i in three.output]
    assert kinds[0] == "compaction" and "message" in kinds
    writer = "resp_" + three.output[0].id.removeprefix("cmp_")
    summary = client.responses.retrieve(writer).output_text
    assert "alpha beta gamma" in summary
    # The engine was given the summary and the new message: no earlier turn.
    head = f"developer: Summary of the conversation before this point:\n{summary}"
    assert three.output_text == f"{head} | user: what now?"
    recorded = facts_of(server, three.id)["extra"]["compaction"]
    assert recorded["threshold"] == 20 and recorded["input_tokens"] > 20
    assert recorded["summarized_by"] == writer
    # The next turn continues from the compaction, not from the turns it replaced.
    four = client.responses.create(
        model="scripted", input="and then?", previous_response_id=three.id, metadata=TRANSCRIPT
    )
    assert four.output_text.startswith(f"{head} | user: what now? | assistant: ")
    assert four.output_text.endswith("| user: and then?")
    shown = conversation_view(server, four.id)
    assert f"the conversation before here compacted, summary written by {writer}" in shown


def conversation_view(server: Server, named: str) -> str:
    """`resplog conversation` of a response or a conversation."""
    return subprocess.run(
        [RESPLOG, "conversation", named, "--database-url", server.database_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


def facts_of(server: Server, rid: str) -> dict[str, Any]:
    out = subprocess.run(
        [RESPLOG, "events", rid, "--json", "--database-url", server.database_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return dict(json.loads(out.splitlines()[0])["facts"])


def test_context_management_compacts_a_conversation_and_its_next_turn_starts_there(
    client: openai.OpenAI, server: Server
) -> None:
    """A create on a `conversation` over `compact_threshold`: the conversation's items are
    summarised by a response of its own, which joins no conversation; the compaction joins
    this one before the input it kept, and the next turn starts from it, as a
    `previous_response_id` continuation does."""
    conv = client.conversations.create(
        items=[{"role": "user", "content": "alpha beta gamma delta epsilon"}]
    )
    client.responses.create(
        model="scripted", conversation=conv.id, input="zeta eta theta iota kappa"
    )
    three = client.responses.create(
        model="scripted",
        input="what now?",
        conversation=conv.id,
        context_management=[{"type": "compaction", "compact_threshold": 20}],
        metadata=TRANSCRIPT,
    )
    kinds = [i.type for i in three.output]
    assert kinds[0] == "compaction" and "message" in kinds
    writer = client.responses.retrieve("resp_" + three.output[0].id.removeprefix("cmp_"))
    assert writer.conversation is None and writer.metadata == {"resplog_compaction": "1"}
    assert "alpha beta gamma" in writer.output_text and "zeta eta" in writer.output_text
    head = f"developer: Summary of the conversation before this point:\n{writer.output_text}"
    assert three.output_text == f"{head} | user: what now?"
    recorded = facts_of(server, three.id)["extra"]["compaction"]
    assert recorded["summarized_by"] == writer.id and recorded["input_tokens"] > 20
    listed = client.conversations.items.list(conv.id, order="asc", limit=100).data
    assert [i.type for i in listed] == [
        *["message"],  # the first item
        *["message", "reasoning", "message"],  # the second turn
        *["compaction", "message", "reasoning", "message"],  # this one: the compaction first
    ]
    assert listed[4].id == three.output[0].id
    assert listed[5].model_dump()["content"][0]["text"] == "what now?"
    four = client.responses.create(
        model="scripted", input="and then?", conversation=conv.id, metadata=TRANSCRIPT
    )
    # The summary, then this turn's items from the compaction on, and no earlier item.
    reasoning = listed[6].model_dump()["content"][0]["text"]
    assert four.output_text == (
        f"{head} | user: what now? | reasoning: {reasoning} | assistant: {three.output_text}"
        " | user: and then?"
    )
    shown = conversation_view(server, conv.id)
    assert f"the conversation before here compacted, summary written by {writer.id}" in shown
    checked = subprocess.run(
        [RESPLOG, "verify", "--all", "--database-url", server.database_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_compacted_tool_loop_step_keeps_no_output_without_its_call(
    client: openai.OpenAI,
) -> None:
    """A tool loop's step sends only the outputs of the calls the previous response made;
    compacted there, those calls are replaced by the summary, so the outputs go with them
    (an engine cannot render an output without its call): the engine is given the summary,
    which holds them, and the next step continues from it."""
    tools: Any = [
        {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
    ]
    first = client.responses.create(model="scripted", input="go", tools=tools)
    call = first.output[-1]
    assert call.type == "function_call"
    step = client.responses.create(
        model="scripted",
        previous_response_id=first.id,
        tools=tools,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "42"}],
        context_management=[{"type": "compaction", "compact_threshold": 1}],
        tool_choice="none",  # the scripted engine answers with its transcript
        metadata=TRANSCRIPT,
    )
    assert step.output[0].type == "compaction"
    writer = client.responses.retrieve("resp_" + step.output[0].id.removeprefix("cmp_"))
    assert "function_call_output" in writer.output_text  # the summary holds the output
    head = f"developer: Summary of the conversation before this point:\n{writer.output_text}"
    assert step.output_text == head
    after = client.responses.create(
        model="scripted", previous_response_id=step.id, input="and?", metadata=TRANSCRIPT
    )
    assert after.output_text == f"{head} | assistant: {head} | user: and?"
