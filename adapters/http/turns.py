"""How many requests begin in one turn of the event loop: at most `PER_TURN`; the rest begin
in the turns after, in the order they came.

uvicorn starts a task for each request whose head it has read, and every task made ready in
a turn runs its first step in the next one. A burst of connections that send their requests
at once (256 replays of one large response: docs/performance.md, "Stalled readers") then
puts all their first steps in one turn, each through the middlewares, the key check and
the route to its first database read: one turn of 250 ms or more, and everything else the
process does (`/health` too) waits for it. Admitted a few a turn, the same requests take the
same CPU in turns of a few milliseconds, and what arrives meanwhile is not held behind them.
A stream's large writes (adapters/http/sse.py) take their places here too: 256 streams
that each give the loop a turn after a write would still make one write each every turn.

`/health`, the liveness probe, is never held: it costs nearly nothing, and what it answers
is whether the loop turns, not how long the queue is.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque

# Requests begun (and large stream writes made) in one turn, at most: those released from
# the queue and those that find room. Eight first steps of a replay, to its first database
# read, take a few milliseconds on the 2-core box.
PER_TURN = 8
NEVER_HELD = frozenset({"/health"})


class Turnstile:
    """Admits `per_turn` requests a turn of the running loop; the rest wait for later turns,
    in order: `if not room(): await wait()`."""

    __slots__ = ("_begun", "_per_turn", "_ticking", "_waiting")

    def __init__(self, per_turn: int = PER_TURN) -> None:
        self._per_turn = per_turn
        self._begun = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._ticking = False

    def room(self) -> bool:
        """Whether a request may begin now without waiting (it then takes its place)."""
        # Not a coroutine: nearly every request finds room, and pays no await for it.
        if self._waiting or self._begun >= self._per_turn:
            return False
        self._begun += 1
        self._tick()
        return True

    async def wait(self) -> None:
        """Wait for a later turn with room for one more request (after `room` said no)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        self._tick()
        await waiter  # cancelled: done, so `_turn` passes it over

    def _tick(self) -> None:
        """The next turn's accounting: a callback scheduled now runs in the next turn, before
        what is made ready after it (the tasks it releases among them)."""
        if not self._ticking:
            self._ticking = True
            asyncio.get_running_loop().call_soon(self._turn)

    def _turn(self) -> None:
        self._ticking = False
        self._begun = 0
        waiting = self._waiting
        if waiting:
            self._tick()  # first: the next turn's count is reset before its work runs
        while waiting and self._begun < self._per_turn:
            waiter = waiting.popleft()
            if not waiter.done():  # a waiter cancelled meanwhile gives its place up
                waiter.set_result(None)
                self._begun += 1
        if self._begun:
            self._tick()


_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Turnstile] = (
    weakref.WeakKeyDictionary()
)


def turnstile() -> Turnstile:
    """The running loop's turnstile, which everything of the process that begins costly work
    in a burst shares."""
    loop = asyncio.get_running_loop()
    found = _BY_LOOP.get(loop)
    if found is None:
        found = _BY_LOOP[loop] = Turnstile()
    return found
