"""The turnstile (adapters/http/turns.py): a burst of requests begins a few a turn of the
event loop, in the order they came; a waiter that gives up gives its place up; `/health`
is never held at the edge."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from adapters.http.edge import edge
from adapters.http.turns import Turnstile, turnstile


def turn_counter() -> list[int]:
    """A count of the loop's turns so far: a callback that schedules itself again each turn."""
    loop = asyncio.get_running_loop()
    count = [0]

    def tick() -> None:
        count[0] += 1
        loop.call_soon(tick)

    loop.call_soon(tick)
    return count


async def test_a_burst_begins_a_few_a_turn_in_the_order_it_came() -> None:
    turns = Turnstile(per_turn=4)
    count = turn_counter()
    begun: list[tuple[int, int]] = []

    async def request(n: int) -> None:
        if not turns.room():
            await turns.wait()
        begun.append((n, count[0]))

    await asyncio.gather(*(request(n) for n in range(30)))
    assert [n for n, _ in begun] == list(range(30))
    per_turn = Counter(turn for _, turn in begun)
    assert max(per_turn.values()) <= 4
    assert len(per_turn) >= 30 // 4  # spread over turns, not begun at once


async def test_requests_that_find_room_do_not_wait() -> None:
    turns = Turnstile(per_turn=4)
    assert [turns.room() for _ in range(6)] == [True] * 4 + [False] * 2
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert turns.room()  # a later turn has room again


async def test_a_waiter_that_gives_up_gives_its_place_up() -> None:
    turns = Turnstile(per_turn=1)
    assert turns.room()
    gone = asyncio.ensure_future(turns.wait())
    staying = asyncio.ensure_future(turns.wait())
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.wait_for(staying, 1)
    assert gone.cancelled()


async def test_the_liveness_probe_is_never_held_at_the_edge() -> None:
    served: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        served.append(scope["path"])

    async def nothing(*_: Any) -> None:
        return None

    front = edge(app, 0)
    turns = turnstile()
    while turns.room():  # this turn's room taken
        pass
    held = asyncio.ensure_future(front({"type": "http", "path": "/v1/models"}, nothing, nothing))
    await front({"type": "http", "path": "/health"}, nothing, nothing)
    assert served == ["/health"]
    await asyncio.wait_for(held, 1)
    assert served == ["/health", "/v1/models"]
