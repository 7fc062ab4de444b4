"""The runner reads the engine on demand and logs what arrived meanwhile as one batch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from domain.events import OutputTextDelta
from domain.fold import replay
from domain.generation import AnyDelta, EndItem, Finished, Prompt, TextDelta, TokenUsage
from service.bundle import Bundle
from service.ports import Demand
from tests.unit.conftest import Processes
from tests.unit.test_service import run_to_end, text_of

TOKENS = [f" t{i}" for i in range(120)]


class Wire:
    """An engine behind a network: a producer puts a token on the wire every `pace`
    seconds; a read (after `demand`) takes everything on the wire, as aiohttp's readany."""

    name = "wire"

    def __init__(self, pace: float, *, lockstep: bool = False) -> None:
        self.pace = pace
        self.lockstep = lockstep  # the next token only once the last one was read
        self.reads = 0

    def models(self) -> list[str]:
        return ["m"]

    def serves(self, model: str) -> bool:
        return True

    async def ready(self) -> bool:
        return True

    async def aclose(self) -> None:
        pass

    async def generate(
        self, prompt: Prompt, *, demand: Demand | None = None
    ) -> AsyncIterator[AnyDelta]:
        wire: asyncio.Queue[str] = asyncio.Queue()

        async def produce() -> None:
            for token in TOKENS:
                await asyncio.sleep(self.pace)
                if self.lockstep:
                    await wire.join()
                wire.put_nowait(token)

        producer = asyncio.create_task(produce())
        try:
            sent = 0
            while sent < len(TOKENS):
                if demand is not None:
                    await demand()
                self.reads += 1
                first = await wire.get()
                got = [first] + [wire.get_nowait() for _ in range(wire.qsize())]
                for _ in got:
                    wire.task_done()
                sent += len(got)
                for token in got:
                    yield TextDelta(text=token)
            yield EndItem()
            usage = TokenUsage(input_tokens=1, output_tokens=len(TOKENS))
            yield Finished(reason="stop", usage=usage)
        finally:
            producer.cancel()


async def _delta_events(svc: Bundle, rid: str) -> int:
    return sum(isinstance(e.event(), OutputTextDelta) for e in await svc.store.read(rid))


async def test_tokens_that_arrive_while_a_batch_commits_become_one_event(
    processes: Processes,
) -> None:
    engine = Wire(pace=0.001)
    # Commits at most every 20 ms, like a slow database round trip.
    svc = await processes.start(engine, flush_interval_ms=20)
    final = await run_to_end(svc, input="x")
    assert final.status == "completed"
    assert text_of(final) == "".join(TOKENS)
    events = await _delta_events(svc, final.id)
    assert events < len(TOKENS) / 4  # ~120 ms of tokens over 20 ms commits
    assert engine.reads <= events + 2  # read only when the runner asked for more
    assert replay(e.event() for e in await svc.store.read(final.id)).response == final


async def test_a_runner_that_keeps_up_logs_every_token_as_it_comes(processes: Processes) -> None:
    engine = Wire(pace=0.002, lockstep=True)
    svc = await processes.start(engine)
    final = await run_to_end(svc, input="x")
    assert text_of(final) == "".join(TOKENS)
    assert await _delta_events(svc, final.id) == len(TOKENS)
