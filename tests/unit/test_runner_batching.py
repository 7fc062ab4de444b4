"""The runner reads the engine on demand and logs what arrived meanwhile as one batch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from domain.events import AnyEvent, OutputTextDelta
from domain.fold import replay
from domain.generation import AnyDelta, EndItem, Finished, Prompt, TextDelta, TokenUsage
from service.ports import Demand
from tests.fakes.memory import MemoryStore
from tests.unit.test_service import make_services, run_to_end, text_of

TOKENS = [f" t{i}" for i in range(120)]


class SlowStore(MemoryStore):
    """Commits take `latency` seconds, like a database round trip."""

    def __init__(self, latency: float) -> None:
        super().__init__()
        self.latency = latency

    async def append(
        self,
        stream_id: str,
        expected_version: int,
        events: Sequence[AnyEvent],
        *,
        durable: bool = True,
    ) -> None:
        await asyncio.sleep(self.latency)
        await super().append(stream_id, expected_version, events, durable=durable)


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


def _delta_events(store: MemoryStore, rid: str) -> int:
    return sum(isinstance(e.event(), OutputTextDelta) for e in store.events[rid])


async def test_tokens_that_arrive_while_a_batch_commits_become_one_event() -> None:
    engine = Wire(pace=0.001)
    svc, _ = make_services(engine)
    store = SlowStore(latency=0.02)
    svc.store = svc.writer = svc.index = store
    svc.runner._writer = store
    final = await run_to_end(svc, input="x")
    assert final.status == "completed"
    assert text_of(final) == "".join(TOKENS)
    events = _delta_events(store, final.id)
    assert events < len(TOKENS) / 4  # ~120 ms of tokens over 20 ms commits
    assert engine.reads <= events + 2  # read only when the runner asked for more
    assert replay(e.event() for e in store.events[final.id]).response == final


async def test_a_runner_that_keeps_up_logs_every_token_as_it_comes() -> None:
    engine = Wire(pace=0.002, lockstep=True)
    svc, store = make_services(engine)
    final = await run_to_end(svc, input="x")
    assert text_of(final) == "".join(TOKENS)
    assert _delta_events(store, final.id) == len(TOKENS)
