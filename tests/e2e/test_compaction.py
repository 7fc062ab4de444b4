"""`POST /v1/responses/compact` end to end with the official SDK: the summary is written by a
response of its own (in the log, retrievable), the compaction item carries it sealed, and a
later request that passes the item gives the engine the summary in place of the turns."""

from __future__ import annotations

import subprocess
from typing import Any

import openai
import pytest

from tests.e2e.conftest import RESPLOG, Server

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
    shown = subprocess.run(
        [RESPLOG, "conversation", later.id, "--database-url", server.database_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert f"compaction: earlier turns replaced by the summary {compacted.id} wrote" in shown


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
