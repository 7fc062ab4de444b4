"""Every request the real agent clients sent (captured under tests/fixtures/clients by the
client tests) through the wire decoder: accepted, its extras kept as facts, and rendered to
both kinds of engine as documented (tools the model is offered, hosted ones not)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapters.engines.harmony.render import HarmonyRenderer
from adapters.engines.openai_chat import chat_request
from domain.objects import ItemReference
from domain.tools import HOSTED_TOOL_TYPES, narrowed, offered
from service.prompts.build import build_prompt
from service.prompts.item_ids import assign_ids
from service.wire.decode import parse_create_body
from service.wire.extras import with_client_headers
from service.wire.limits import Limits

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "clients"
CAPTURED = [
    (f"{path.stem}#{n}", request)
    for path in sorted(FIXTURES.glob("*.json"))
    for n, request in enumerate(json.loads(path.read_text()))
    if request["method"] == "POST" and request["path"] == "/v1/responses"
]


def _hosted(tools: list[dict[str, Any]]) -> list[str]:
    return [t["type"] for t in tools if t.get("type") in HOSTED_TOOL_TYPES]


@pytest.mark.parametrize(("name", "request_"), CAPTURED, ids=[n for n, _ in CAPTURED])
def test_a_captured_request_decodes_and_renders(
    name: str, request_: dict[str, Any], renderer: HarmonyRenderer
) -> None:
    body = request_["body"]
    req = with_client_headers(
        parse_create_body(json.dumps(body).encode(), Limits()), request_["headers"]
    )
    # What the client sent beside the response's own fields is kept as facts.
    if "client_metadata" in body:
        assert req.extra["client_metadata"] == body["client_metadata"]
    if "session-id" in request_["headers"]:
        assert req.extra["client_headers"]["session-id"] == request_["headers"]["session-id"]
    hosted = _hosted(body.get("tools") or [])
    assert req.extra.get("tools_not_offered", []) == hosted
    # Every tool is echoed; only the callable ones are offered.
    tools = req.response.tools
    assert len(tools) == len(body.get("tools") or [])
    shown = [] if response_choice(req) == "none" else narrowed(offered(tools), response_choice(req))
    names = {t.name for t in shown}
    # A request that builds on the log (previous_response_id, item references) renders
    # only with its history: the client tests replay those against a server.
    if body.get("previous_response_id") or any(isinstance(i, ItemReference) for i in req.input):
        return
    items = list(req.input)
    response = req.response
    prompt = build_prompt(response, assign_ids("resp_" + "0" * 32, items), [])  # type: ignore[arg-type]
    chat = chat_request(prompt, "m")
    chat_names = {t["function"]["name"].split("__")[-1] for t in chat.get("tools", [])}
    assert chat_names == names
    rendered = renderer.encoding.decode(renderer.render(prompt))
    for tool in shown:
        assert f"type {tool.name} = " in rendered


def response_choice(req: Any) -> Any:
    return req.response.tool_choice
