"""The shared catch-up read (with a fake fetch): where it reads from, and reading on when a
stream fills its limit."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from adapters.store.catchup import CatchUp
from adapters.store.hub import Hub
from service.ports import StoredEvent


def _event(stream_id: str, position: int) -> StoredEvent:
    return StoredEvent(stream_id, position, "response.output_text.delta", b"{}", None, 0.0)


LOG = {"resp_a": [_event("resp_a", p) for p in range(10)]}


async def test_a_stream_that_fills_the_limit_is_read_again_from_its_new_position() -> None:
    hub = Hub()
    asked: list[list[tuple[str, int]]] = []

    async def fetch(points: Sequence[tuple[str, int]], limit: int) -> list[StoredEvent]:
        asked.append(list(points))
        return [e for sid, after in points for e in LOG[sid] if e.position > after][:limit]

    catchup = CatchUp(hub, fetch, limit=3)
    await catchup.start()
    with hub.subscribe("resp_a") as sub:
        sub.position = 1  # the tail has yielded 0 and 1 and is waiting
        catchup.want(["resp_a"])
        got: list[int] = []
        async with asyncio.timeout(5):
            while len(got) < 8:
                await sub.wait(5)
                got.extend(e.position for e in sub.take()[0])
    await catchup.stop()
    assert got == list(range(2, 10))
    assert [points[0][1] for points in asked] == [1, 4, 7]


async def test_tails_still_on_their_first_read_are_rung_instead() -> None:
    hub = Hub()
    calls = 0

    async def fetch(points: Sequence[tuple[str, int]], limit: int) -> list[StoredEvent]:
        nonlocal calls
        calls += 1
        return []

    catchup = CatchUp(hub, fetch)
    await catchup.start()
    with hub.subscribe("resp_a") as sub:
        catchup.want(["resp_a"])
        async with asyncio.timeout(5):
            assert await sub.wait(5) is True
        assert sub.take() == ([], True)
    await catchup.stop()
    assert calls == 0
