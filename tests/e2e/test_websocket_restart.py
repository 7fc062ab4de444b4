"""A WebSocket session across a drain and a server restart, through the official SDK's own
reconnection (openai-python `client.responses.connect(on_reconnecting=...)`, which
reconnects after the close codes of `src/openai/types/websocket_reconnection.py`):
docs/websocket.md, "Shutdown"."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import openai
from openai.types.websocket_reconnection import ReconnectingEvent, ReconnectingOverrides

from tests.e2e.conftest import Server, start_server, stop_server

TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")
SLOW = {"scripted_delay_ms": "25", "scripted_tokens": "100"}  # some 2.5 s
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
    runs to its end and the socket gets it all; a `response.create` sent meanwhile is not
    started but answered with an error event (503 `server_shutting_down`, a `retry-after`
    header) on its lane; then the socket closes with 1001. The SDK reconnects by itself to
    the restarted server (same port, same log), and the session goes on from the log with
    `previous_response_id`."""
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
            await asyncio.sleep(0.5)  # the signal reaches the connection
            await conn.response.create(model="scripted", input="late", stream_id="z")
            one = await _until(events, "response.completed")
            errors = [e for e in one if e["type"] == "error"]
            assert len(errors) == 1 and errors[0]["status"] == 503, errors
            assert errors[0]["stream_id"] == "z"
            assert errors[0]["error"]["code"] == "server_shutting_down"
            assert errors[0]["error"]["headers"] == {"retry-after": "1"}
            assert not any(e.get("stream_id") == "z" for e in one if e["type"] != "error")
            assert [e["type"] for e in one if e["type"] in TERMINAL] == [
                "error",
                "response.completed",
            ]
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
