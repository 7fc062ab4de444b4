"""The WebSocket use-case (`service.responses.sockets`) over the real SQLite store and the scripted
engine: each lane's cache of its last response, and when it is emptied."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator

import msgspec
import pytest

from adapters.http.sockets import with_lane
from domain.errors import InvalidRequest
from service.bundle import Bundle
from service.ports import StoredEvent
from service.prompts.history import load_history
from service.responses import stopping
from service.responses.sockets import SocketSession
from service.wire.create_request import CreateRequest
from service.wire.decode import parse_create_body
from service.wire.limits import Limits
from tests.unit.conftest import Processes

OWNER = "alice"
TRANSCRIPT = {"scripted_mode": "transcript"}


def request(**body: object) -> CreateRequest:
    body.setdefault("model", "scripted")
    body.setdefault("stream", True)
    return parse_create_body(msgspec.json.encode(body), Limits())


async def drain(events: AsyncGenerator[StoredEvent, None]) -> dict[str, object]:
    """The final object of a turn's events."""
    last = None
    async for event in events:
        last = event
    assert last is not None and last.terminal
    response: dict[str, object] = json.loads(last.data)["response"]
    return response


def text(response: dict[str, object]) -> str:
    output = response["output"]
    assert isinstance(output, list)
    return "".join(p["text"] for o in output if o["type"] == "message" for p in o["content"])


async def test_a_store_false_chain_continues_from_the_lanes_memory(processes: Processes) -> None:
    svc = await processes.start()
    session = SocketSession(svc, OWNER)
    one = await drain(await session.create(None, request(input="a", store=False)))
    assert session.remembered(str(one["id"])) is not None
    two = await drain(
        await session.create(
            None,
            request(input="b", store=False, previous_response_id=one["id"], metadata=TRANSCRIPT),
        )
    )
    assert text(two) == f"user: a | assistant: {text(one)} | user: b"
    assert session.remembered(str(one["id"])) is None  # only the last response is kept
    history = session.remembered(str(two["id"]))
    assert history is not None and [t.response_id for t in history] == [one["id"], two["id"]]
    # Another connection (a reconnect) remembers nothing: the log never continues it.
    with pytest.raises(InvalidRequest) as refused:
        await SocketSession(svc, OWNER).create(
            None, request(input="c", previous_response_id=two["id"])
        )
    assert refused.value.code == "previous_response_not_found"
    assert "store=false" in refused.value.message


async def test_a_refused_create_empties_its_lane_only(processes: Processes) -> None:
    svc = await processes.start()
    session = SocketSession(svc, OWNER)
    a = await drain(await session.create("a", request(input="a")))
    b = await drain(await session.create("b", request(input="b")))
    with pytest.raises(InvalidRequest) as refused:
        await session.create("b", request(input="x", previous_response_id="resp_unknown"))
    assert refused.value.code == "previous_response_not_found"
    assert refused.value.param == "previous_response_id"
    assert session.remembered(str(b["id"])) is None
    assert session.remembered(str(a["id"])) is not None


async def test_a_cancelled_turn_empties_its_lane(processes: Processes) -> None:
    svc: Bundle = await processes.start()
    session = SocketSession(svc, OWNER)
    kept = await drain(await session.create(None, request(input="kept")))
    slow = {"scripted_delay_ms": "20", "scripted_tokens": "500"}
    events = await session.create(None, request(input="bg", background=True, metadata=slow))
    first = await events.__anext__()
    rid = json.loads(first.data)["response"]["id"]
    await stopping.cancel_response(svc, rid, OWNER)
    final = await drain(events)
    assert final["status"] == "cancelled"
    assert session.remembered(str(kept["id"])) is None


async def test_the_cache_is_bounded_per_connection(processes: Processes) -> None:
    """Past `max_bytes` (all lanes together) a response is not remembered: a stored one
    is then continued from the log, a `store: false` one cannot be."""
    svc = await processes.start()
    probe = SocketSession(svc, OWNER)
    one = await drain(await probe.create(None, request(input="a")))
    entry = probe._entry(str(one["id"]))
    assert entry is not None and entry.size > 0
    session = SocketSession(svc, OWNER, max_bytes=entry.size + entry.size // 2)
    a = await drain(await session.create("a", request(input="a", store=False)))
    b = await drain(await session.create("b", request(input="a", store=False)))
    assert session.remembered(str(a["id"])) is not None  # one fits
    assert session.remembered(str(b["id"])) is None  # two do not
    with pytest.raises(InvalidRequest) as refused:
        await session.create("b", request(input="c", previous_response_id=b["id"]))
    assert "outgrew the connection's memory" in refused.value.message
    stored = await drain(await session.create("b", request(input="s")))
    again = await drain(
        await session.create("b", request(input="t", previous_response_id=stored["id"]))
    )
    assert again["status"] == "completed"  # over the bound, from the log


def test_an_event_echoes_its_lane() -> None:
    data = b'{"type":"response.created","sequence_number":0}'
    assert with_lane(data, None) is data
    assert json.loads(with_lane(data, 'l"1')) == {
        "type": "response.created",
        "sequence_number": 0,
        "stream_id": 'l"1',
    }


async def test_the_lanes_memory_of_a_turn_is_the_turn_the_log_gives(processes: Processes) -> None:
    # A turn whose input passed an MCP tool list back (set aside, shown to no model): the
    # lane remembers the list in the turn's context, as the log's history has it.
    svc = await processes.start()
    session = SocketSession(svc, OWNER)
    listed = {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "docs"}
    listed["tools"] = [{"name": "search", "input_schema": {"type": "object"}}]
    given = [{"role": "user", "content": "a"}, listed]
    one = await drain(await session.create(None, request(input=given)))
    remembered = session.remembered(str(one["id"]))
    logged = await load_history(svc, str(one["id"]), OWNER)
    assert remembered == logged
    assert [(i.id, i.server_label) for i in logged[0].listed] == [("mcpl_1", "docs")]
