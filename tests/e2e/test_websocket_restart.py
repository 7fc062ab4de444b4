"""A WebSocket session across a drain and a server restart, through the official SDK's own
reconnection (openai-python `client.responses.connect(on_reconnecting=...)`, which
reconnects after the close codes of `src/openai/types/websocket_reconnection.py`):
docs/websocket.md, "Shutdown"."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.websocket_reconnection import ReconnectingEvent, ReconnectingOverrides

from tests.e2e.conftest import Server, start_server, stop_server

TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")
SLOW = {"scripted_delay_ms": "25", "scripted_tokens": "60"}  # some 1.5 s
TRANSCRIPT = {"scripted_mode": "transcript"}


async def _until(events: asyncio.Queue[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    while not seen or seen[-1]["type"] not in kinds:
        seen.append(await asyncio.wait_for(events.get(), 60))
    return seen


async def test_the_sdk_reconnects_by_itself_after_a_drain_and_a_restart(
    fresh_pg: Any, tmp_path: Path
) -> None:
    """The server is stopped (SIGTERM) while a response streams on the socket: the response
    runs to its end and the socket gets it all, then closes with 1001; the SDK reconnects
    by itself to the restarted server (same port, same log), and the session goes on from
    the log with `previous_response_id`."""
    url = await asyncio.to_thread(fresh_pg)
    log = tmp_path / "server.log"
    first = await asyncio.to_thread(start_server, url, "postgres", log, "--shutdown-grace-s", "20")
    port = int(first.base_url.rsplit(":", 1)[1])
    reconnects: list[ReconnectingEvent] = []

    def on_reconnecting(event: ReconnectingEvent) -> ReconnectingOverrides | None:
        reconnects.append(event)
        return None

    second: Server | None = None
    client = openai.AsyncOpenAI(base_url=f"{first.base_url}/v1", api_key="unused", max_retries=0)
    try:
        async with client.responses.connect(
            on_reconnecting=on_reconnecting, max_retries=10, max_delay=2.0
        ) as conn:
            events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

            async def read() -> None:
                async for event in conn:
                    await events.put(event.to_dict())

            reader = asyncio.create_task(read())
            await conn.response.create(
                model="scripted", input="before", metadata={**SLOW, **TRANSCRIPT}
            )
            await _until(events, "response.output_text.delta")
            first.process.send_signal(signal.SIGTERM)  # mid-stream
            one = await _until(events, *TERMINAL)
            assert one[-1]["type"] == "response.completed", one[-1]
            assert await asyncio.to_thread(first.process.wait, 30) == -signal.SIGTERM
            first.log_file.close()
            assert "Traceback" not in log.read_text()
            second = await asyncio.to_thread(
                start_server, url, "postgres", log, "--shutdown-grace-s", "20", port=port
            )
            one_id = one[-1]["response"]["id"]
            await conn.response.create(
                model="scripted", input="after", metadata=TRANSCRIPT, previous_response_id=one_id
            )
            two = await _until(events, *TERMINAL)
            assert two[-1]["type"] == "response.completed", two[-1]
            said = "".join(
                part["text"]
                for item in two[-1]["response"]["output"]
                if item["type"] == "message"
                for part in item["content"]
            )
            assert said.startswith("user: before | assistant: ") and said.endswith("user: after")
            assert reconnects and {e.close_code for e in reconnects} == {1001}
            reader.cancel()
    finally:
        await client.close()
        if second is not None:
            await asyncio.to_thread(stop_server, second)
        elif first.process.poll() is None:
            await asyncio.to_thread(stop_server, first)


@pytest.fixture
def grace_server(fresh_pg: Any, tmp_path: Path) -> Any:
    srv = start_server(fresh_pg(), "postgres", tmp_path / "server.log", "--shutdown-grace-s", "20")
    yield srv
    if srv.process.poll() is None:
        stop_server(srv)
    else:
        srv.log_file.close()


def test_a_create_sent_while_the_socket_drains_is_a_503_error_event(grace_server: Server) -> None:
    """A `response.create` that arrives once the server began to stop is not started (and
    not lost silently): an error event, 503 `server_shutting_down` with a `retry-after`
    header, on its lane; then the socket closes with 1001 once the running response ended."""
    from websockets.sync.client import connect

    ws_url = grace_server.base_url.replace("http", "ws") + "/v1/responses"
    with connect(ws_url) as ws:
        slow = {"type": "response.create", "model": "scripted", "input": "x", "metadata": SLOW}
        ws.send(json.dumps(slow))
        while json.loads(ws.recv(timeout=30))["type"] != "response.output_text.delta":
            pass
        grace_server.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # the signal reaches the connection (the response runs for longer)
        late = {"type": "response.create", "model": "scripted", "input": "y", "stream_id": "z"}
        ws.send(json.dumps(late))
        seen: list[dict[str, Any]] = []
        closed = _read_until_closed(ws, seen)
    errors = [e for e in seen if e["type"] == "error"]
    assert len(errors) == 1 and errors[0]["status"] == 503, errors
    assert errors[0]["stream_id"] == "z"
    assert errors[0]["error"]["code"] == "server_shutting_down"
    assert errors[0]["error"]["headers"] == {"retry-after": "1"}
    assert closed.rcvd is not None and closed.rcvd.code == 1001
    ends = [e["type"] for e in seen if e["type"] in TERMINAL and e["type"] != "error"]
    assert ends == ["response.completed"]  # the running one ended whole


def _read_until_closed(ws: Any, seen: list[dict[str, Any]]) -> Any:
    from websockets.exceptions import ConnectionClosed

    while True:
        try:
            seen.append(json.loads(ws.recv(timeout=30)))
        except ConnectionClosed as closed:
            return closed
