"""The ASGI body of an event stream (adapters/http/streaming.py): its last write carries the
end of the body, the stream's slot is let go before the client sees that end, a client that
goes away ends the body quietly, and any other cancellation is not swallowed."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.http.sse import DONE, frames
from adapters.http.streaming import EventStream
from adapters.http.watch import ON_GONE
from service.access.quotas import StreamSlots
from service.ports import StoredEvent

Message = dict[str, Any]


def event(position: int, kind: str = "response.output_text.delta") -> StoredEvent:
    data = f'{{"type":"{kind}","sequence_number":{position}}}'.encode()
    return StoredEvent("resp_x", position, kind, data, None, 0.0)


async def tail(
    events: list[StoredEvent], gate: asyncio.Event | None = None
) -> AsyncIterator[list[StoredEvent]]:
    for e in events:
        if gate is not None and e.terminal:
            await gate.wait()  # the stream pauses before its end
        yield [e]


class Client:
    """uvicorn's side of the ASGI exchange: `receive` answers `http.disconnect` once the
    client has gone or the response is complete, as uvicorn does. `open_at_end`: the
    streams its key held when the end of the body was sent."""

    def __init__(self, slots: StreamSlots) -> None:
        self.slots = slots
        self.sent: list[Message] = []
        self.ended = asyncio.Event()
        self.gone = asyncio.Event()
        self.open_at_end: int | None = None
        self.first = asyncio.Event()

    async def receive(self) -> Message:
        done = asyncio.ensure_future(self.ended.wait())
        left = asyncio.ensure_future(self.gone.wait())
        await asyncio.wait({done, left}, return_when=asyncio.FIRST_COMPLETED)
        done.cancel()
        left.cancel()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body":
            self.first.set()
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.open_at_end = self.slots.open("key")
            self.ended.set()

    @property
    def bodies(self) -> list[Message]:
        return [m for m in self.sent if m["type"] == "http.response.body"]

    async def started(self) -> None:
        await self.first.wait()


def stream(events: AsyncIterator[list[StoredEvent]], slots: StreamSlots, closed: list[bool]) -> Any:
    body = frames(events, keepalive_s=None, on_close=closed.append)  # type: ignore[arg-type]
    response = EventStream(body, slots.acquire("key"), media_type="text/event-stream", headers={})
    return response.to_asgi_response(None, None)  # type: ignore[arg-type]


async def test_the_last_write_carries_the_end_of_the_body_after_the_slot_is_let_go() -> None:
    slots, closed = StreamSlots(1), []
    client = Client(slots)
    events = [event(0, "response.created"), event(1), event(2, "response.completed")]
    asgi = stream(tail(events), slots, closed)
    await asyncio.wait_for(asgi({"type": "http"}, client.receive, client.send), 5)
    bodies = client.bodies
    assert [m["more_body"] for m in bodies] == [True] * (len(bodies) - 1) + [False]
    last = b"event: response.completed\ndata: " + events[2].data + b"\n\n" + DONE
    assert bodies[-1]["body"].endswith(last)
    assert all(m["body"] for m in bodies), "no empty write just to end the body"
    assert closed == [True]
    assert client.open_at_end == 0  # let go before the client could see the end
    slots.acquire("key")


async def test_a_client_that_goes_away_ends_the_body_quietly() -> None:
    slots, closed = StreamSlots(1), []
    client = Client(slots)
    gate = asyncio.Event()  # never set: the stream waits for its end forever
    asgi = stream(
        tail([event(0, "response.created"), event(1, "response.completed")], gate), slots, closed
    )
    sending = asyncio.create_task(asgi({"type": "http"}, client.receive, client.send))
    await client.started()
    client.gone.set()
    assert await asyncio.wait_for(sending, 5) is None  # no CancelledError out of the request
    assert closed == [False]
    assert all(m["more_body"] for m in client.bodies)  # uvicorn ends a dropped connection itself
    slots.acquire("key")


async def test_a_server_that_says_when_the_client_goes_away_needs_no_watcher() -> None:
    """Under `serve` (its protocol runs the scope's `ON_GONE` callbacks: adapters/cli/
    protocol.py) the body registers one callback instead of waiting on `receive`; the
    callback ends the body as quietly, and a body that ends takes its callback back."""
    slots, closed = StreamSlots(2), []
    client = Client(slots)
    received: list[None] = []

    async def receive() -> Message:
        received.append(None)
        return await client.receive()

    gate = asyncio.Event()
    asgi = stream(
        tail([event(0, "response.created"), event(1, "response.completed")], gate), slots, closed
    )
    on_gone: list[Any] = []
    scope = {"type": "http", ON_GONE: on_gone}
    sending = asyncio.create_task(asgi(scope, receive, client.send))
    await client.started()
    assert len(on_gone) == 1 and received == []
    on_gone[0]()  # the connection was lost
    assert await asyncio.wait_for(sending, 5) is None
    assert closed == [False] and on_gone == []

    whole = stream(tail([event(0, "response.created"), event(1, "response.completed")]), slots, [])
    await asyncio.wait_for(whole(scope, receive, client.send), 5)
    assert on_gone == [] and received == []
    slots.acquire("key")
    slots.acquire("key")


async def test_a_body_that_begins_after_its_client_went_away_ends_at_once() -> None:
    """`serve`'s protocol leaves None in the scope's `ON_GONE` once the connection is lost
    (adapters/cli/protocol.py): the body asks `receive`, which says so at once."""
    slots, closed = StreamSlots(1), []
    client = Client(slots)
    client.gone.set()
    gate = asyncio.Event()  # never set: only the disconnect ends this stream
    asgi = stream(
        tail([event(0, "response.created"), event(1, "response.completed")], gate), slots, closed
    )
    scope = {"type": "http", ON_GONE: None}
    assert await asyncio.wait_for(asgi(scope, client.receive, client.send), 5) is None
    assert closed == [False]
    slots.acquire("key")


async def test_a_cancellation_from_elsewhere_is_not_swallowed() -> None:
    slots, closed = StreamSlots(1), []
    client = Client(slots)
    gate = asyncio.Event()
    asgi = stream(
        tail([event(0, "response.created"), event(1, "response.completed")], gate), slots, closed
    )
    sending = asyncio.create_task(asgi({"type": "http"}, client.receive, client.send))
    await client.started()
    sending.cancel()  # a server shutting down, say
    with pytest.raises(asyncio.CancelledError):
        await sending
    assert closed == [False]
    slots.acquire("key")


async def test_a_stream_dropped_before_its_body_began_lets_its_slot_go() -> None:
    slots, closed = StreamSlots(1), []
    asgi = stream(tail([event(0, "response.completed")]), slots, closed)
    del asgi
    gc.collect()
    slots.acquire("key")


async def gated(events: list[StoredEvent], gate: asyncio.Event) -> AsyncIterator[list[StoredEvent]]:
    await gate.wait()  # the first events are a while coming
    yield events


@pytest.mark.parametrize("head_with_first", [True, False])
async def test_a_creates_stream_sends_its_head_with_its_first_write(head_with_first: bool) -> None:
    """A create's stream (its first events committed already) holds its head until its
    first write, so that both leave in one turn of the loop (one write on the socket:
    adapters/cli/protocol.py); any other stream sends its head at once, whenever its first
    event comes."""
    slots, closed = StreamSlots(1), []
    client, gate = Client(slots), asyncio.Event()
    body = frames(
        gated([event(0, "response.created"), event(1, "response.completed")], gate),
        keepalive_s=None,
        on_close=closed.append,
    )
    response = EventStream(
        body,
        slots.acquire("key"),
        media_type="text/event-stream",
        headers={},
        head_with_first=head_with_first,
    )
    asgi = response.to_asgi_response(None, None)  # type: ignore[arg-type]
    sending = asyncio.create_task(asgi({"type": "http"}, client.receive, client.send))
    await asyncio.sleep(0.05)
    assert [m["type"] for m in client.sent] == ([] if head_with_first else ["http.response.start"])
    gate.set()
    await asyncio.wait_for(sending, 5)
    assert [m["type"] for m in client.sent[:2]] == ["http.response.start", "http.response.body"]
    assert client.sent[0]["status"] == 200 and closed == [True]
