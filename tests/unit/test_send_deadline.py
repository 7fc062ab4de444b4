"""The send deadline (adapters/http/backpressure.py, and the edge's own for HTTP requests,
adapters/http/edge.py) against a stand-in for uvicorn's request cycle: a write that has to
wait for the client (its transport paused) is cut at the deadline and the connection
aborted; a write the transport takes at once is not timed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.http.backpressure import send_deadline
from adapters.http.edge import edge

Message = dict[str, Any]


class Flow:
    def __init__(self, paused: bool) -> None:
        self.write_paused = paused


class Transport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class Cycle:
    """What the middleware reads of uvicorn's `RequestResponseCycle`: `flow` and
    `transport`; its `send` of a body waits on `release` while writing is paused."""

    def __init__(self, paused: bool, slow: float = 0.0) -> None:
        self.flow = Flow(paused)
        self.transport = Transport()
        self.release = asyncio.Event()
        self.slow = slow
        self.sent: list[Message] = []

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body" and self.flow.write_paused:
            await self.release.wait()
        await asyncio.sleep(self.slow)
        self.sent.append(message)


def app_writing(body: bytes) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return app


async def nothing() -> Message:
    return {"type": "http.disconnect"}


WRAPS = pytest.mark.parametrize("wrap", [send_deadline, edge], ids=["send_deadline", "edge"])


@WRAPS
async def test_a_write_that_waits_for_the_client_is_cut_at_the_deadline(wrap: Any) -> None:
    cycle = Cycle(paused=True)
    guarded = wrap(app_writing(b"x"), 0.05)
    await asyncio.wait_for(guarded({"type": "http"}, nothing, cycle.send), 5)
    assert cycle.transport.aborted
    assert [m["type"] for m in cycle.sent] == ["http.response.start"]


@WRAPS
async def test_a_write_the_transport_takes_at_once_goes_through_untimed(wrap: Any) -> None:
    # uvicorn's send never waits while writing is not paused; this stand-in takes longer
    # than the deadline all the same, to show that no deadline was armed for it
    cycle = Cycle(paused=False, slow=0.1)
    guarded = wrap(app_writing(b"x"), 0.05)
    await guarded({"type": "http"}, nothing, cycle.send)
    assert not cycle.transport.aborted
    assert [m.get("body") for m in cycle.sent] == [None, b"x"]
