"""Batching between an engine and the log: the runner's `Inbox` reads the engine's deltas in
a task of its own while an append is in flight, and hands over what arrived as one batch,
merged by `coalesce`. Engines know nothing of it; they yield deltas as they parse them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import msgspec

from domain.errors import EngineError
from domain.generation import (
    AnyDelta,
    ArgumentsDelta,
    ReasoningDelta,
    RefusalDelta,
    SummaryDelta,
    TextDelta,
)

# The most deltas an inbox holds before it stops reading its engine (see `Inbox`). Under
# load a batch is tens of tokens, so this only binds when the log stalls; it bounds a
# stream's held deltas to some tens of KiB.
MAX_HELD = 256

_MERGEABLE = (ReasoningDelta, SummaryDelta, TextDelta, RefusalDelta, ArgumentsDelta)


def coalesce(deltas: list[AnyDelta]) -> list[AnyDelta]:
    """Merge runs of same-kind text deltas (same phase for text) into one.

    A batch holds what the engine sent while the previous batch was being logged: one delta
    when the log keeps up, many when it falls behind. Merging them costs no latency (they
    are logged together anyway) and turns a backlog into a few large events instead of one
    event per token.
    """
    out: list[AnyDelta] = []
    for delta in deltas:
        last = out[-1] if out else None
        if isinstance(delta, TextDelta) and isinstance(last, TextDelta):
            if delta.phase == last.phase:
                out[-1] = msgspec.structs.replace(
                    delta,
                    text=last.text + delta.text,
                    logprobs=[*last.logprobs, *delta.logprobs],
                )
                continue
        elif isinstance(delta, _MERGEABLE) and type(last) is type(delta):
            out[-1] = msgspec.structs.replace(delta, text=last.text + delta.text)
            continue
        out.append(delta)
    return out


class Inbox:
    """Reads an engine's deltas in a task of its own and hands the runner, at each `take`,
    everything that arrived since the last one, merged.

    Why: the runner appends durably, one batch at a time, so a stream never has more than
    one flush in flight. What the engine yields while a flush is in flight waits here and
    becomes the next batch: as load rises (commits take longer), events per token fall,
    and a client sees nothing later than before, because only committed events are ever
    shown. At a GPU's pace the runner is already waiting when a token arrives, so each
    token is its own event.

    Reading is cheap per delta: an HTTP engine reads everything its connection has buffered
    in one call and yields the parsed deltas one by one, and an async generator suspends
    only when it awaits the network, so the deltas of one read reach `_held` in one step
    of this task.

    Backpressure: once `limit` deltas are held, the reader stops pulling from the engine
    until the runner takes them. An engine is an async generator, so while it is not pulled
    it does not read its connection either: the bytes wait in the HTTP client's buffer
    (aiohttp stops reading the socket past its high-water mark), then in the TCP windows,
    which hold up the engine server's writes. Without the cap, a log that stalls while a
    fast engine streams would hold whole responses in this process's memory.
    """

    def __init__(self, stream: AsyncGenerator[AnyDelta, None], *, limit: int = MAX_HELD) -> None:
        self._stream = stream
        self._limit = limit
        self._held: list[AnyDelta] = []
        self._error: BaseException | None = None
        self._ended = False
        self._arrived = asyncio.Event()  # something is held, or the stream ended
        self._room = asyncio.Event()  # fewer than `limit` are held
        self._room.set()
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for delta in self._stream:
                self._held.append(delta)
                self._arrived.set()
                if len(self._held) >= self._limit:
                    self._room.clear()
                    await self._room.wait()
        except Exception as exc:  # raised to the runner once what came before is logged
            self._error = exc
        finally:
            self._ended = True
            self._arrived.set()

    async def take(self) -> list[AnyDelta]:
        """Everything read since the last take (at least one delta), merged; the engine's
        error once everything before it was taken."""
        while not self._held:
            if self._ended:
                if self._error is not None:
                    raise self._error
                raise EngineError(
                    "the engine stopped without finishing the response", code="protocol_error"
                )
            self._arrived.clear()
            await self._arrived.wait()
        held, self._held = self._held, []
        self._room.set()
        return coalesce(held)

    async def close(self) -> None:
        """Stop reading; closing the engine's iterator aborts the generation there."""
        if not self._task.done():
            self._task.cancel()
        # `wait`, not `await task`: the reader's own cancellation must not be taken for ours.
        await asyncio.wait([self._task])
        await self._stream.aclose()
