"""The runner's inbox: what an engine yields while the consumer is busy becomes one merged
batch, in order, bounded; a consumer that waits gets each delta as it comes."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterable

import pytest

from domain.errors import EngineError
from domain.generation import (
    AnyDelta,
    ArgumentsDelta,
    EndItem,
    Finished,
    FunctionCallStart,
    ReasoningDelta,
    TextDelta,
    TokenUsage,
)
from service.work.batching import Inbox, coalesce

STOP = Finished(reason="stop", usage=TokenUsage())


def test_runs_of_the_same_kind_merge_and_boundaries_stay() -> None:
    deltas = [
        ReasoningDelta(text="a"),
        ReasoningDelta(text="b"),
        EndItem(),
        TextDelta(text="c", phase="commentary"),
        TextDelta(text="d", phase="commentary"),
        TextDelta(text="e", phase="final_answer"),
        FunctionCallStart(name="f"),
        ArgumentsDelta(text="{"),
        ArgumentsDelta(text="}"),
    ]
    assert coalesce(deltas) == [
        ReasoningDelta(text="ab"),
        EndItem(),
        TextDelta(text="cd", phase="commentary"),
        TextDelta(text="e", phase="final_answer"),
        FunctionCallStart(name="f"),
        ArgumentsDelta(text="{}"),
    ]


def test_merged_text_keeps_every_tokens_logprobs_in_order() -> None:
    a = {"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": []}
    b = {"token": "b", "logprob": -1.0, "bytes": [98], "top_logprobs": []}
    merged = coalesce([TextDelta(text="a", logprobs=[a]), TextDelta(text="b", logprobs=[b])])
    assert merged == [TextDelta(text="ab", logprobs=[a, b])]


def test_two_calls_in_a_row_are_not_merged() -> None:
    deltas = [FunctionCallStart(name="f"), FunctionCallStart(name="g")]
    assert coalesce(deltas) == deltas
    assert coalesce([]) == []


class Source:
    """An engine's iterator: yields `deltas`, `pace` seconds apart, then raises `error`;
    counts what was pulled and whether it was left early."""

    def __init__(
        self, deltas: list[AnyDelta], pace: float = 0.0, error: Exception | None = None
    ) -> None:
        self.deltas, self.pace, self.error = deltas, pace, error
        self.pulled = 0
        self.closed = False

    async def run(self) -> AsyncIterator[AnyDelta]:
        ended = False
        try:
            for delta in self.deltas:
                await asyncio.sleep(self.pace)
                self.pulled += 1
                yield delta
            ended = True
            if self.error is not None:
                raise self.error
        finally:
            self.closed = not ended  # left early: where an engine aborts the generation


def tokens(n: int) -> list[AnyDelta]:
    return [TextDelta(text=f" t{i}") for i in range(n)]


def text(deltas: Iterable[AnyDelta]) -> str:
    return "".join(d.text for d in deltas if isinstance(d, TextDelta))


async def drain(inbox: Inbox, busy: float = 0.0) -> list[list[AnyDelta]]:
    """Take batches up to `Finished`, spending `busy` seconds on each (the append)."""
    batches: list[list[AnyDelta]] = []
    while True:
        batch = await inbox.take()
        batches.append(batch)
        if isinstance(batch[-1], Finished):
            return batches
        await asyncio.sleep(busy)


async def take_until_error(inbox: Inbox, busy: float = 0.0) -> tuple[list[AnyDelta], Exception]:
    """Everything taken before `take` raised, and what it raised."""
    got: list[AnyDelta] = []
    try:
        while True:
            got += await inbox.take()
            await asyncio.sleep(busy)
    except Exception as exc:
        return got, exc
    finally:
        await inbox.close()


async def test_what_arrives_while_the_consumer_is_busy_is_one_merged_batch() -> None:
    source = Source([*tokens(60), EndItem(), STOP], pace=0.001)
    inbox = Inbox(source.run())
    batches = await drain(inbox, busy=0.03)
    await inbox.close()
    assert len(batches) < 10  # ~60 ms of tokens over 30 ms appends
    assert max(len(b) for b in batches) <= 3  # one text delta, perhaps the end and finish
    assert text(d for b in batches for d in b) == text(tokens(60))


async def test_a_consumer_that_waits_gets_each_delta_as_it_comes() -> None:
    source = Source([*tokens(20), STOP], pace=0.002)
    inbox = Inbox(source.run())
    batches = await drain(inbox)
    await inbox.close()
    assert batches == [[d] for d in [*tokens(20), STOP]]


@pytest.mark.parametrize("seed", range(5))
async def test_nothing_is_lost_or_reordered_whatever_the_timing(seed: int) -> None:
    rng = random.Random(seed)
    kinds = [
        lambda i: ReasoningDelta(text=f"r{i}"),
        lambda i: TextDelta(text=f"c{i}", phase="commentary"),
        lambda i: TextDelta(text=f"a{i}", phase="final_answer"),
        lambda i: EndItem(),
        lambda i: FunctionCallStart(name=f"f{i}"),
        lambda i: ArgumentsDelta(text=f"g{i}"),
    ]
    deltas: list[AnyDelta] = [rng.choice(kinds)(i) for i in range(300)]
    source = Source([*deltas, STOP], pace=0.0)
    inbox = Inbox(source.run())
    got: list[AnyDelta] = []
    while not got or not isinstance(got[-1], Finished):
        got += await inbox.take()
        await asyncio.sleep(rng.choice([0, 0, 0.001, 0.003]))
    await inbox.close()
    assert coalesce(got) == coalesce([*deltas, STOP])


async def test_an_engine_error_comes_after_everything_before_it() -> None:
    error = EngineError("sglang dropped the connection", code="engine_disconnected")
    source = Source(tokens(10), pace=0.001, error=error)
    got, raised = await take_until_error(Inbox(source.run()), busy=0.004)
    assert raised is error
    assert text(got) == text(tokens(10))


async def test_an_engine_that_ends_without_finishing_is_an_error() -> None:
    got, raised = await take_until_error(Inbox(Source(tokens(2)).run()))
    assert isinstance(raised, EngineError) and "without finishing" in raised.message
    assert coalesce(got) == [TextDelta(text=" t0 t1")]


async def test_a_busy_consumer_stops_the_reading_at_the_limit() -> None:
    source = Source([*tokens(1000), STOP])
    inbox = Inbox(source.run(), limit=50)
    await asyncio.sleep(0.05)  # the consumer is busy: nothing taken yet
    assert source.pulled == 50
    first = await inbox.take()
    assert first == [TextDelta(text="".join(f" t{i}" for i in range(50)))]
    await asyncio.sleep(0.05)
    assert source.pulled == 100  # another `limit`, no more
    rest = await drain(inbox)
    await inbox.close()
    assert text(d for b in [first, *rest] for d in b) == text(tokens(1000))


async def test_closing_closes_the_engines_iterator() -> None:
    source = Source(tokens(1000), pace=0.001)
    inbox = Inbox(source.run())
    await inbox.take()
    await inbox.close()
    assert source.closed
    pulled = source.pulled
    await asyncio.sleep(0.01)
    assert source.pulled == pulled
