"""What agent clients send, end to end: the tool kinds beside `function` (namespace, custom,
tool_search, hosted tools), `client_metadata` and client headers, and `item_reference`
(issue: the agent clients people use work unmodified). A real server with the scripted
engine, driven by the official SDK or raw HTTP; every test runs on both stores.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import RESPLOG, Server

# Codex CLI's first request, as its tools and fields are shaped (trimmed to what matters).
CODEX_TOOLS: list[dict[str, Any]] = [
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Spawn and talk to sub-agents.",
        "tools": [
            {
                "type": "function",
                "name": "spawn_agent",
                "description": "Start a sub-agent.",
                "strict": False,
                "parameters": {
                    "type": "object",
                    "properties": {"task": {"type": "string"}},
                    "required": ["task"],
                },
            }
        ],
    },
    {"type": "web_search", "external_web_access": False},
]
APPLY_PATCH: dict[str, Any] = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/s"},
}


def facts(server: Server, rid: str) -> dict[str, Any]:
    """The request facts of a response's first event, read with the admin CLI."""
    out = subprocess.run(
        [RESPLOG, "events", rid, "--json", "--database-url", server.database_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    first: dict[str, Any] = json.loads(out.stdout.splitlines()[0])
    return dict(first["facts"])


def test_codex_first_request_is_answered_and_its_extras_are_facts(
    http: httpx.Client, server: Server
) -> None:
    body = {
        "model": "scripted",
        "instructions": "You are Codex.",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "hello there"}],
                "internal_chat_message_metadata_passthrough": {"turn": 1},
            }
        ],
        "tools": CODEX_TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "store": True,
        "stream": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "thread-1",
        "client_metadata": {"session_id": "s-1", "turn_id": "t-9"},
    }
    headers = {"session-id": "s-1", "thread-id": "th-1", "originator": "codex_exec"}
    got = http.post("/v1/responses", json=body, headers=headers)
    assert got.status_code == 200, got.text
    response = got.json()
    assert response["tools"][0]["type"] == "namespace"
    assert response["tools"][0]["tools"][0]["name"] == "spawn_agent"
    assert response["tools"][1] == {"type": "web_search", "external_web_access": False}
    assert "client_metadata" not in response
    # The scripted engine calls the first tool it is offered: the namespaced function.
    call = response["output"][-1]
    assert (call["type"], call["name"], call["namespace"]) == (
        "function_call",
        "spawn_agent",
        "multi_agent_v1",
    )
    recorded = facts(server, response["id"])
    assert recorded["extra"]["client_metadata"] == {"session_id": "s-1", "turn_id": "t-9"}
    assert recorded["extra"]["client_headers"] == headers
    assert recorded["extra"]["tools_not_offered"] == ["web_search"]


def test_hosted_tools_are_echoed_and_never_offered(client: openai.OpenAI) -> None:
    """LangChain's `bind_tools([{"type": "web_search_preview"}])`: accepted, echoed, and the
    model (which cannot run it here) answers without calling anything."""
    r = client.responses.create(
        model="scripted", input="hi", tools=[{"type": "web_search_preview"}]
    )
    assert r.status == "completed"
    assert [t.type for t in r.tools] == ["web_search_preview"]
    assert r.output_text == "You said: hi"


def test_a_custom_tool_call_streams_its_input_and_round_trips(
    client: openai.OpenAI, http: httpx.Client, server: Server
) -> None:
    tools: Any = [APPLY_PATCH]
    with client.responses.stream(model="scripted", input="*** Begin Patch", tools=tools) as s:
        kinds = [e.type for e in s]
        first = s.get_final_response()
    assert "response.custom_tool_call_input.delta" in kinds
    assert "response.custom_tool_call_input.done" in kinds
    call = first.output[-1]
    assert call.type == "custom_tool_call"
    assert (call.name, call.input) == ("apply_patch", "*** Begin Patch")
    assert first.tools[0].type == "custom"
    # The stored log replays what the client saw.
    replay = http.get(f"/v1/responses/{first.id}/events").text
    assert "response.custom_tool_call_input.done" in replay
    second = client.responses.create(
        model="scripted",
        previous_response_id=first.id,
        tools=tools,
        input=[{"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done!"}],
    )
    assert second.output_text == "The function returned: Done!"
    # The audit CLI renders the custom call and its output.
    shown = subprocess.run(
        [RESPLOG, "conversation", second.id, "--database-url", server.database_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert f"custom_tool_call apply_patch ({call.call_id}): *** Begin Patch" in shown
    assert f"custom_tool_call_output ({call.call_id}): Done!" in shown


def test_store_false_history_with_custom_and_namespaced_calls_is_accepted(
    client: openai.OpenAI,
) -> None:
    """Codex's `store: false` turns pass the whole history back, its calls included."""
    history: Any = [
        {"role": "user", "content": "patch it"},
        {
            "type": "custom_tool_call",
            "call_id": "c1",
            "name": "apply_patch",
            "input": "*** Begin Patch",
        },
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "ok"},
        {
            "type": "function_call",
            "call_id": "c2",
            "name": "spawn_agent",
            "namespace": "multi_agent_v1",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "c2", "output": "spawned"},
    ]
    r = client.responses.create(
        model="scripted",
        store=False,
        input=history,
        tools=[APPLY_PATCH, *CODEX_TOOLS],  # type: ignore[list-item]
    )
    assert r.output_text == "The function returned: spawned"


def test_item_reference_resolves_an_earlier_item_of_the_same_owner(
    client: openai.OpenAI,
) -> None:
    """The Vercel AI SDK's second step: earlier output items sent by reference."""
    tools: Any = [
        {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
    ]
    first = client.responses.create(model="scripted", input="go", tools=tools)
    reasoning, call = first.output[0], first.output[-1]
    assert reasoning.type == "reasoning" and call.type == "function_call"
    second = client.responses.create(
        model="scripted",
        tools=tools,
        input=[
            {"role": "user", "content": "go"},
            {"type": "item_reference", "id": reasoning.id},
            {"id": call.id},  # openai-python `ItemReference`: the type may be left out
            {"type": "function_call_output", "call_id": call.call_id, "output": "42"},
        ],
    )
    assert second.output_text == "The function returned: 42"
    items = client.responses.input_items.list(second.id, order="asc").data
    assert [i.type for i in items] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert items[1].id == reasoning.id and items[2].id == call.id


@pytest.mark.parametrize("ref", ["rs_doesnotexist_0", "msg_00000000000000000000000000000000_0"])
def test_an_unknown_item_reference_is_openais_404_and_writes_nothing(
    client: openai.OpenAI, server: Server, ref: str
) -> None:
    before = server.count_rows("responses")
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="scripted", input=[{"type": "item_reference", "id": ref}])
    body: Any = caught.value.body
    assert body["param"] == "input"
    assert body["message"].startswith(f"Item with id '{ref}' not found.")
    assert server.count_rows("responses") == before


def test_input_tokens_counts_what_a_create_would_take_and_writes_nothing(
    client: openai.OpenAI, server: Server
) -> None:
    first = client.responses.create(model="scripted", input="one two three")
    body: Any = {
        "model": "scripted",
        "instructions": "Be brief.",
        "previous_response_id": first.id,
        "input": [
            {"type": "item_reference", "id": first.output[-1].id},
            {"role": "user", "content": "four five"},
        ],
        "tools": [{"type": "web_search"}],
    }
    before = server.count_rows("responses"), server.count_rows("events")
    counted = client.responses.input_tokens.count(**body)
    assert (server.count_rows("responses"), server.count_rows("events")) == before
    made = client.responses.create(**body)
    assert made.usage is not None and counted.input_tokens == made.usage.input_tokens
    # `model` may be left out (the server's model counts); `personality` is ignored.
    assert client.responses.input_tokens.count(input="a b", personality="friendly").input_tokens
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.input_tokens.count(input="a", extra_body={"stream": True})
    assert bad.value.code == "unknown_parameter"
    with pytest.raises(openai.NotFoundError):
        client.responses.input_tokens.count(input="a", previous_response_id="resp_" + "1" * 32)


def test_stateless_reasoning_comes_back_sealed_and_is_opened_next_turn(
    client: openai.OpenAI, server: Server
) -> None:
    """`store: false` + `include: ["reasoning.encrypted_content"]`: the reasoning item carries
    a sealed blob; passed back without its text, the engine is given its text again; a
    blob this server did not seal is OpenAI's 400 and writes nothing."""
    first = client.responses.create(
        model="scripted", input="one two", store=False, include=["reasoning.encrypted_content"]
    )
    reasoning = first.output[0]
    assert reasoning.type == "reasoning" and reasoning.content
    blob = reasoning.encrypted_content
    assert blob is not None and blob.startswith("rsv1.")
    thought = reasoning.content[0].text
    back: Any = {"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": blob}
    second = client.responses.create(
        model="scripted",
        store=False,
        input=[back, {"role": "user", "content": "again"}],
        metadata={"scripted_mode": "transcript"},
    )
    assert f"reasoning: {thought}" in second.output_text
    before = server.count_rows("responses")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="scripted",
            input=[
                {**back, "encrypted_content": blob[:-4] + "AAAA"},
                {"role": "user", "content": "x"},
            ],
        )
    assert caught.value.code == "invalid_encrypted_content"
    assert server.count_rows("responses") == before


def test_a_tool_output_that_answers_no_call_is_openais_400(
    client: openai.OpenAI, server: Server
) -> None:
    """Rather than a response that fails in the engine (harmony cannot render an orphan)."""
    first = client.responses.create(model="scripted", input="hi")
    before = server.count_rows("responses")
    orphan: Any = [{"type": "function_call_output", "call_id": "call_nowhere", "output": "42"}]
    for extra in ({}, {"previous_response_id": first.id}):
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="scripted", input=orphan, **extra)
        body: Any = caught.value.body
        assert body["message"] == (
            "No tool call found for function call output with call_id call_nowhere."
        )
        assert body["param"] == "input"
    assert server.count_rows("responses") == before


def test_prompt_cache_retention_is_echoed_when_sent(client: openai.OpenAI) -> None:
    r = client.responses.create(model="scripted", input="hi", prompt_cache_retention="24h")
    assert r.prompt_cache_retention == "24h"
    plain = client.responses.create(model="scripted", input="hi")
    assert "prompt_cache_retention" not in plain.model_dump(exclude_unset=True)


# Items a client passes back from an OpenAI answer, of kinds no engine here is given
# (openai-python `ResponseInputItemParam`): shaped as the SDK types them.
PASSED_BACK: list[dict[str, Any]] = [
    {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "weather"},
    },
    {
        "type": "computer_call_output",
        "call_id": "call_c1",
        "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"},
    },
    {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "docs", "tools": []},
    {"type": "local_shell_call_output", "id": "lsco_1", "output": "ok"},
]


def test_items_of_kinds_no_engine_takes_are_accepted_and_listed_in_place(
    client: openai.OpenAI, server: Server
) -> None:
    """Never a 400 for an item OpenAI takes: each is kept as sent (an id is given to one
    that came without), listed by `input_items` in its place, and kept out of the facts'
    `input`, which every prompt is built from."""
    sent: list[Any] = [
        {"role": "user", "content": "before"},
        *PASSED_BACK,
        {"role": "user", "content": "after"},
    ]
    resp = client.responses.create(model="scripted", input=sent)
    assert resp.status == "completed"
    listed = [
        i.model_dump(exclude_none=True)
        for i in client.responses.input_items.list(resp.id, order="asc")
    ]
    assert [i["type"] for i in listed] == ["message", *(p["type"] for p in PASSED_BACK), "message"]
    suffix = resp.id.removeprefix("resp_")
    assert listed[2] == {"id": f"item_{suffix}_in2", **PASSED_BACK[1]}
    for given, got in zip(
        [PASSED_BACK[0], *PASSED_BACK[2:]], [listed[1], *listed[3:5]], strict=True
    ):
        assert got == given
    page = client.responses.input_items.list(resp.id, order="asc", after="ws_1", limit=2)
    assert [i.id for i in page.data] == [f"item_{suffix}_in2", "mcpl_1"]
    kept = facts(server, resp.id)["extra"]["input_set_aside"]
    assert [a["at"] for a in kept] == [1, 2, 3, 4]
    assert [i["type"] for i in facts(server, resp.id)["input"]] == ["message", "message"]


def test_an_item_an_earlier_request_set_aside_is_found_by_reference(
    client: openai.OpenAI, server: Server
) -> None:
    """An input item of a kind no engine takes is given an id (`item_<response>_in<index>`)
    that a later request may name by `item_reference`: it is set aside there too, in the
    reference's place, and listed as the first request sent it."""
    unnamed = {k: v for k, v in PASSED_BACK[3].items() if k != "id"}
    first = client.responses.create(
        model="scripted", input=[{"role": "user", "content": "hi"}, unnamed]
    )
    kept = client.responses.input_items.list(first.id, order="asc").data[1]
    assert kept.type == "local_shell_call_output" and kept.id.startswith("item_")
    second = client.responses.create(
        model="scripted",
        input=[
            {"role": "user", "content": "before"},
            {"type": "item_reference", "id": kept.id},
            PASSED_BACK[0],
            {"role": "user", "content": "after"},
        ],
        metadata={"scripted_mode": "transcript"},
    )
    assert second.output_text == "user: before | user: after"
    listed = client.responses.input_items.list(second.id, order="asc").data
    assert [i.type for i in listed] == [
        "message",
        "local_shell_call_output",
        "web_search_call",
        "message",
    ]
    assert listed[1].model_dump() == kept.model_dump()
    assert [a["at"] for a in facts(server, second.id)["extra"]["input_set_aside"]] == [1, 2]


MCP_CALL: dict[str, Any] = {
    "type": "mcp_call",
    "id": "mcp_7",
    "server_label": "docs",
    "name": "search",
    "arguments": '{"q": "tea"}',
    "output": "green tea",
    "status": "completed",
}


def test_an_mcp_call_passed_back_is_shown_to_the_model_as_a_call_and_its_output(
    client: openai.OpenAI, server: Server
) -> None:
    """A client that keeps its own history (the Agents SDK's default, the Vercel AI SDK)
    passes an earlier turn's MCP calls back as input (openai-python
    `ResponseInputItemParam.McpCall`). The next model is shown each as a function call and
    its output (or error), as it is shown the calls of a response it continues; one still
    running has no result and is not shown. All are listed as sent, and counted."""
    running = {**MCP_CALL, "id": "mcp_8", "status": "calling", "output": None}
    error = {"type": "http_error", "code": 502, "message": "Bad Gateway"}
    failed = {**MCP_CALL, "id": "mcp_9", "status": "failed", "output": None, "error": error}
    sent: list[Any] = [
        {"role": "user", "content": "find tea"},
        MCP_CALL,
        running,
        failed,
        {"role": "user", "content": "so?"},
    ]
    resp = client.responses.create(
        model="scripted", input=sent, metadata={"scripted_mode": "transcript"}
    )
    assert resp.output_text == (
        "user: find tea | function_call:  | function_call_output: green tea | "
        f"function_call:  | function_call_output: {json.dumps({'error': error})} | user: so?"
    )
    listed = [
        i.model_dump(exclude_none=True)
        for i in client.responses.input_items.list(resp.id, order="asc")
    ]
    assert listed[1:4] == [{k: v for k, v in i.items() if v is not None} for i in sent[1:4]]
    recorded = facts(server, resp.id)
    assert [i["type"] for i in recorded["input"]] == ["message", *["mcp_call"] * 3, "message"]
    assert "input_set_aside" not in recorded["extra"]
    counted = client.responses.input_tokens.count(model="scripted", input=sent)
    plain = client.responses.input_tokens.count(model="scripted", input=[sent[0], sent[-1]])
    assert counted.input_tokens > plain.input_tokens


def test_an_mcp_call_without_its_server_is_a_400(client: openai.OpenAI) -> None:
    bad = {k: v for k, v in MCP_CALL.items() if k != "server_label"}
    with pytest.raises(openai.BadRequestError) as missing:
        client.responses.create(model="scripted", input=[bad])  # type: ignore[list-item]
    assert missing.value.body["param"] == "input[0].server_label"  # type: ignore[index]
    assert missing.value.body["code"] == "missing_required_parameter"  # type: ignore[index]


def test_set_aside_is_resplogs_word_and_a_bad_item_keeps_its_index(
    client: openai.OpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError) as own:
        client.responses.create(model="scripted", input=[{"type": "set_aside", "item": {}}])  # type: ignore[list-item]
    assert own.value.body["param"] == "input[0].type"  # type: ignore[index]
    bad = [*PASSED_BACK, {"role": "user", "content": [{"type": "nonsense"}]}]
    with pytest.raises(openai.BadRequestError) as late:
        client.responses.create(model="scripted", input=bad)  # type: ignore[arg-type]
    assert late.value.body["param"] == f"input[{len(PASSED_BACK)}].content[0].type"  # type: ignore[index]
