"""The doorbell payload and the hub's routing of it (pure, no database)."""

from __future__ import annotations

import asyncio

from adapters.store.hub import Hub, stream_key
from adapters.store.listener import CHANNEL, Listener, doorbell_payload, parse_payload
from service.ports import StoredEvent


def _event(stream_id: str, position: int) -> StoredEvent:
    return StoredEvent(stream_id, position, "response.output_text.delta", b"{}", None, 0.0)


def test_a_payload_names_each_moved_stream_once_by_its_key() -> None:
    payload = doorbell_payload("me", ["resp_a", "resp_b", "resp_a"])
    origin, keys = parse_payload(payload)
    assert origin == "me"
    assert sorted(keys or []) == sorted({stream_key("resp_a"), stream_key("resp_b")})


def test_a_payload_too_big_for_one_notify_says_many() -> None:
    ids = [f"resp_{i:024x}" for i in range(2000)]
    payload = doorbell_payload("me", ids)
    assert len(payload.encode()) < 8000
    assert parse_payload(payload) == ("me", None)


def test_three_hundred_streams_still_fit_by_name() -> None:
    ids = [f"resp_{i:024x}" for i in range(300)]
    _, keys = parse_payload(doorbell_payload("me", ids))
    assert keys is not None
    assert len(keys) == 300


def test_the_listener_rings_for_other_processes_commits_only() -> None:
    """A process hears its own flushes' notifications too; their events reached its hub at
    the commit, so only another origin's ring the tails (`origin` "ab" is a prefix of "abc"
    but not its origin)."""
    rung: list[list[str] | None] = []
    listener = Listener("postgresql://unused", rung.append, "ab")
    for origin, ids in (
        ("ab", ["resp_a"]),
        ("abc", ["resp_b"]),
        ("ab", [f"r{i}" for i in range(2000)]),
    ):
        listener._on_notify(None, 0, CHANNEL, doorbell_payload(origin, ids))
    listener._on_notify(None, 0, CHANNEL, doorbell_payload("xy", [f"r{i}" for i in range(2000)]))
    assert rung == [[stream_key("resp_b")], None]


async def test_a_key_names_only_its_streams_subscribers() -> None:
    hub = Hub()
    with hub.subscribe("resp_a") as a, hub.subscribe("resp_b") as b:
        hub.ring(hub.streams([stream_key("resp_a")]))
        assert await a.wait(0.01) is True
        assert a.take() == ([], True)
        assert await b.wait(0.01) is False
    assert hub.subscribers("resp_a") == 0
    assert hub._keys == {}


async def test_an_overflowing_subscription_drops_its_buffer_and_asks_for_a_re_read() -> None:
    hub = Hub(capacity=3)
    with hub.subscribe("resp_a") as sub:
        hub.publish({"resp_a": [_event("resp_a", 0), _event("resp_a", 1)]})
        hub.publish({"resp_a": [_event("resp_a", 2), _event("resp_a", 3)]})
        events, reread = sub.take()
        assert (events, reread) == ([], True)
        hub.publish({"resp_a": [_event("resp_a", 4)]})
        assert sub.take() == ([_event("resp_a", 4)], False)


async def test_a_waiting_subscriber_is_woken_by_a_delivery() -> None:
    hub = Hub()
    with hub.subscribe("resp_a") as sub:
        waiter = asyncio.create_task(sub.wait(30))
        await asyncio.sleep(0)
        hub.publish({"resp_a": [_event("resp_a", 0)]})
        assert await waiter is True
