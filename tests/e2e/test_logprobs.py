"""`top_logprobs` with `include: ["message.output_text.logprobs"]`, end to end with the
official SDK on both stores (scripted engine): one entry per token in the final
`output_text`, the same entries spread over the stream's `response.output_text.delta`
events and repeated on `.done`, replayed from the log as they were streamed; none unless
asked."""

from __future__ import annotations

from typing import Any

import httpx
import openai

from tests.e2e.conftest import Server

LOGPROBS: Any = ["message.output_text.logprobs"]


def test_logprobs_are_per_token_in_the_stream_and_the_final_text(
    client: openai.OpenAI, server: Server
) -> None:
    events = list(
        client.responses.create(
            model="scripted",
            input="count these words",
            include=LOGPROBS,
            top_logprobs=2,
            stream=True,
        )
    )
    final = events[-1].response  # type: ignore[union-attr]
    message = next(i for i in final.output if i.type == "message")
    part: Any = message.content[0]
    assert part.logprobs and "".join(lp.token for lp in part.logprobs) == part.text
    for lp in part.logprobs:
        assert lp.logprob == 0.0 and lp.bytes == list(lp.token.encode())
        assert [t.token for t in lp.top_logprobs] == [lp.token]  # a script is certain
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    streamed = [lp for e in deltas for lp in e.logprobs]  # type: ignore[union-attr]
    assert [lp.token for lp in streamed] == [lp.token for lp in part.logprobs]
    done: Any = next(e for e in events if e.type == "response.output_text.done")
    assert [lp.token for lp in done.logprobs] == [lp.token for lp in part.logprobs]
    # Retrieval and the replay carry them as they were streamed.
    again: Any = client.responses.retrieve(final.id).output[-1].content[0]
    assert again.logprobs == part.logprobs
    with httpx.Client(base_url=server.base_url) as http:
        replay = http.get(f"/v1/responses/{final.id}/events", params={"format": "jsonl"})
    assert '"logprobs":[{"token":' in replay.text


def test_no_logprobs_unless_include_asks(client: openai.OpenAI) -> None:
    plain = client.responses.create(model="scripted", input="hi", top_logprobs=3)
    part: Any = plain.output[-1].content[0]  # type: ignore[union-attr]
    assert part.logprobs == []
    assert plain.top_logprobs == 3
