"""The runner reads the engine in a task of its own and logs what arrived during an append
as one batch; the engine knows nothing of it. On the real SQLite store: a slow log is a
long flush interval, a stalled one a write lock held by another connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from domain.errors import EngineError
from domain.events import OutputTextDelta
from domain.fold.replay import project, replay
from domain.generation import AnyDelta, EndItem, Finished, Prompt, TextDelta, TokenUsage
from domain.reasons import CancelReason
from service.bundle import Bundle
from service.responses import create as uc
from service.work.batching import MAX_HELD
from tests.unit.conftest import Processes
from tests.unit.test_service import OWNER, request, run_to_end, text_of

TOKENS = [f" t{i}" for i in range(120)]


class Wire:
    """An engine behind a network, as the HTTP adapters read one: a producer puts a token on
    the wire every `pace` seconds; a read takes everything on the wire (aiohttp's
    `readany`) and the deltas are yielded one by one, as parsed. `fail_after` tokens it
    raises instead of finishing."""

    name = "wire"
    media: frozenset[str] = frozenset()

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

    def context_window(self, model: str) -> int | None:
        return None

    def serves(self, model: str) -> bool:
        return True

    async def ready(self) -> bool:
        return True

    async def aclose(self) -> None:
        pass

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
    assert text_of(final) == "".join(TOKENS)  # nothing lost, nothing reordered
    events = await _delta_events(svc, final.id)
    assert events < len(TOKENS) / 4  # ~120 ms of tokens over 20 ms commits
    assert replay(e.event() for e in await svc.store.read(final.id)).response == final


async def test_a_runner_that_keeps_up_logs_every_token_as_it_comes(processes: Processes) -> None:
    # A GPU's pace (a token every 30 ms) against commits of a few ms.
    tokens = TOKENS[:20]
    engine = Wire(pace=0.03, lockstep=True, tokens=tokens)
    svc = await processes.start(engine, flush_interval_ms=2)
    final = await run_to_end(svc, input="x")
    assert text_of(final) == "".join(tokens)
    assert await _delta_events(svc, final.id) == len(tokens)


async def test_an_engine_error_still_logs_what_came_before_it(processes: Processes) -> None:
    engine = Wire(pace=0.001, fail_after=50)
    svc = await processes.start(engine, flush_interval_ms=20)
    final = await run_to_end(svc, input="x")
    assert final.status == "failed" and final.error is not None
    assert text_of(final) == "".join(TOKENS[:50])
    assert await _delta_events(svc, final.id) < 50  # batched, and all of it logged
    assert not engine.aborted


async def test_cancelling_a_generation_aborts_the_engine(processes: Processes) -> None:
    engine = Wire(pace=0.005)
    svc = await processes.start(engine)
    started = await uc.create_response(svc, request(input="x"), OWNER)
    await asyncio.sleep(0.1)
    rid = started.response.id
    assert svc.runner.request_cancel(rid, CancelReason.CANCELLED_BY_USER) is not None
    assert started.generation is not None
    final = project(await started.generation.wait())
    assert final.status == "cancelled"
    assert engine.aborted
    assert 0 < len(text_of(final)) < len("".join(TOKENS))
    yielded = engine.yielded
    await asyncio.sleep(0.03)
    assert engine.yielded == yielded  # nobody reads the engine any more
    assert await _delta_events(svc, final.id) > 0


async def test_a_stalled_log_stops_the_reading_of_the_engine(processes: Processes) -> None:
    tokens = [f" w{i}" for i in range(16 * MAX_HELD)]
    engine = Wire(pace=0.0, tokens=tokens)
    svc = await processes.start(engine)
    started = await uc.create_response(svc, request(input="x"), OWNER)
    # The log stalls; the engine keeps streaming. Counted from when the lock is held (taking
    # it waits for the commit in progress, as long as a loaded machine makes that).
    async with processes.write_locked():
        at_stall = engine.yielded
        await asyncio.sleep(0.3)
        held = engine.yielded
        assert held - at_stall <= 2 * MAX_HELD  # a batch in the append, MAX_HELD waiting
        assert held < len(tokens)  # the stall stopped it, not the end of the answer
        await asyncio.sleep(0.2)
        assert engine.yielded == held  # and no more is read until the runner takes it
    assert started.generation is not None
    final = project(await started.generation.wait())
    assert final.status == "completed"
    assert text_of(final) == "".join(tokens)
