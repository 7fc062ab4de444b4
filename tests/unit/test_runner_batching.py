"""The runner reads the engine in a task of its own and logs what arrived during an append
as one batch; the engine knows nothing of it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from domain.errors import EngineError
from domain.events import AnyEvent, OutputTextDelta
from domain.generation import AnyDelta, EndItem, Finished, Prompt, TextDelta, TokenUsage
from domain.response import replay
from service import responses as uc
from service.batching import MAX_HELD
from tests.fakes.memory import MemoryStore
from tests.unit.test_service import OWNER, make_services, request, run_to_end, text_of

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
    """An engine behind a network, as the HTTP adapters read one: a producer puts a token on
    the wire every `pace` seconds; a read takes everything on the wire (aiohttp's
    `readany`) and the deltas are yielded one by one, as parsed. `fail_after` tokens it
    raises instead of finishing."""

    name = "wire"

    def __init__(
        self,
        pace: float,
        *,
        lockstep: bool = False,
        tokens: list[str] = TOKENS,
        fail_after: int | None = None,
    ) -> None:
        self.pace = pace
        self.lockstep = lockstep  # the next token only once the last one was read
        self.tokens = tokens
        self.fail_after = fail_after
        self.reads = 0
        self.yielded = 0
        self.aborted = False

    def models(self) -> list[str]:
        return ["m"]

    def serves(self, model: str) -> bool:
        return True

    async def ready(self) -> bool:
        return True

    async def generate(self, prompt: Prompt) -> AsyncIterator[AnyDelta]:
        wire: asyncio.Queue[str] = asyncio.Queue()

        async def produce() -> None:
            for token in self.tokens:
                await asyncio.sleep(self.pace)
                if self.lockstep:
                    await wire.join()
                wire.put_nowait(token)

        producer = asyncio.create_task(produce())
        finished = False
        try:
            sent = 0
            while sent < len(self.tokens):
                self.reads += 1
                first = await wire.get()
                got = [first] + [wire.get_nowait() for _ in range(wire.qsize())]
                for _ in got:
                    wire.task_done()
                for token in got:
                    if sent == self.fail_after:
                        finished = True  # the engine ended it, nothing to abort
                        raise EngineError("the engine went away", code="engine_disconnected")
                    sent += 1
                    self.yielded += 1
                    yield TextDelta(text=token)
            yield EndItem()
            usage = TokenUsage(input_tokens=1, output_tokens=len(self.tokens))
            finished = True
            yield Finished(reason="stop", usage=usage)
        finally:
            self.aborted = not finished
            producer.cancel()


def _delta_events(store: MemoryStore, rid: str) -> int:
    return sum(isinstance(e.event(), OutputTextDelta) for e in store.events[rid])


def _slow(svc: uc.Services, latency: float) -> SlowStore:
    store = SlowStore(latency)
    svc.store = svc.writer = svc.index = store
    svc.runner._writer = store
    return store


async def test_tokens_that_arrive_while_a_batch_commits_become_one_event() -> None:
    engine = Wire(pace=0.001)
    svc, _ = make_services(engine)
    store = _slow(svc, 0.02)
    final = await run_to_end(svc, input="x")
    assert final.status == "completed"
    assert text_of(final) == "".join(TOKENS)  # nothing lost, nothing reordered
    events = _delta_events(store, final.id)
    assert events < len(TOKENS) / 4  # ~120 ms of tokens over 20 ms commits
    assert replay(e.event() for e in store.events[final.id]).response == final


async def test_a_runner_that_keeps_up_logs_every_token_as_it_comes() -> None:
    engine = Wire(pace=0.002, lockstep=True)
    svc, store = make_services(engine)
    final = await run_to_end(svc, input="x")
    assert text_of(final) == "".join(TOKENS)
    assert _delta_events(store, final.id) == len(TOKENS)


async def test_an_engine_error_still_logs_what_came_before_it() -> None:
    engine = Wire(pace=0.001, fail_after=50)
    svc, _ = make_services(engine)
    store = _slow(svc, 0.02)
    final = await run_to_end(svc, input="x")
    assert final.status == "failed" and final.error is not None
    assert text_of(final) == "".join(TOKENS[:50])
    assert _delta_events(store, final.id) < 50  # batched, and all of it logged
    assert not engine.aborted


async def test_cancelling_a_generation_aborts_the_engine() -> None:
    engine = Wire(pace=0.005)
    svc, store = make_services(engine)
    started = await uc.create_response(svc, request(input="x"), OWNER)
    await asyncio.sleep(0.1)
    assert svc.runner.request_cancel(started.response.id, "cancelled_by_user") is not None
    final = uc.project(await started.generation.wait())
    assert final.status == "cancelled"
    assert engine.aborted
    assert 0 < len(text_of(final)) < len("".join(TOKENS))
    yielded = engine.yielded
    await asyncio.sleep(0.03)
    assert engine.yielded == yielded  # nobody reads the engine any more
    assert _delta_events(store, final.id) > 0


async def test_a_stalled_log_stops_the_reading_of_the_engine() -> None:
    tokens = [f" w{i}" for i in range(4 * MAX_HELD)]
    engine = Wire(pace=0.0, tokens=tokens)
    svc, _ = make_services(engine)
    store = _slow(svc, 0.0)
    started = await uc.create_response(svc, request(input="x"), OWNER)
    store.latency = 0.3  # the log stalls; the engine keeps streaming
    await asyncio.sleep(0.1)
    held = engine.yielded
    assert held <= 2 * MAX_HELD  # one batch in the append, at most MAX_HELD waiting
    await asyncio.sleep(0.1)
    assert engine.yielded == held  # and no more is read until the runner takes it
    store.latency = 0.0
    final = uc.project(await started.generation.wait())
    assert final.status == "completed"
    assert text_of(final) == "".join(tokens)
