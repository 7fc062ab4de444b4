"""`reasoning.summary` end to end with the official SDK on both stores (scripted engine):
the reasoning item gains a summary written by a second, short generation, streamed as
OpenAI's summary events and kept in the log; none unless asked."""

from __future__ import annotations

from typing import Any

import openai

from tests.e2e.conftest import Server


def test_a_summary_streams_into_the_reasoning_item(client: openai.OpenAI, server: Server) -> None:
    events = list(
        client.responses.create(
            model="scripted", input="think first", reasoning={"summary": "concise"}, stream=True
        )
    )
    final: Any = events[-1].response  # type: ignore[union-attr]
    item = next(i for i in final.output if i.type == "reasoning")
    reasoning = "".join(c.text for c in item.content)
    assert reasoning and len(item.summary) == 1
    # The scripted engine answers the reasoning as it answers anything: "You said: ...".
    assert item.summary[0].text == f"You said: {reasoning}"
    kinds = [e.type for e in events]
    order = [
        "response.reasoning_text.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
    ]
    at = [kinds.index(k) for k in order]
    assert at == sorted(at)
    deltas = [e.delta for e in events if e.type == "response.reasoning_summary_text.delta"]  # type: ignore[union-attr]
    assert "".join(deltas) == item.summary[0].text
    # Its tokens are counted, as reasoning.
    plain = client.responses.create(model="scripted", input="think first")
    assert final.usage.output_tokens > plain.usage.output_tokens  # type: ignore[union-attr]
    assert client.responses.retrieve(final.id).output[0] == item
    assert next(i for i in plain.output if i.type == "reasoning").summary == []
