"""The scripted engine under request metadata that asks for too much: bounded, lazy and
cancellable."""

from __future__ import annotations

import asyncio
import tracemalloc

import msgspec
import pytest

from adapters.engines.scripted import KEPT_ABORTS, ScriptedEngine
from domain.errors import EngineError
from domain.generation import ArgumentsDelta, Finished, Prompt, TextDelta
from domain.objects import InputMessage, InputText, ReasoningConfig, TextConfig
from domain.tools import OfferedTool


def prompt(**metadata: str) -> Prompt:
    return Prompt(
        response_id="resp_test",
        model="scripted",
        instructions=None,
        history=[],
        input=[InputMessage(id="msg_1", role="user", content=[InputText(text="one two")])],
        tools=[],
        tool_choice="auto",
        parallel_tool_calls=True,
        max_output_tokens=None,
        temperature=None,
        top_p=None,
        reasoning=ReasoningConfig(),
        text=TextConfig(),
        metadata=metadata,
    )


async def test_a_huge_token_count_is_not_built_up_front() -> None:
    """10^6 asked (and allowed): taking the first deltas allocates next to nothing."""
    engine = ScriptedEngine(max_tokens=10**9)
    tracemalloc.start()
    try:
        gen = engine.generate(prompt(scripted_tokens="1000000"))
        first = [await anext(gen) for _ in range(10)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    await gen.aclose()
    assert len(first) == 10
    assert peak < 1 << 20, f"{peak} bytes for 10 deltas"


async def test_a_token_count_over_the_maximum_is_clamped() -> None:
    engine = ScriptedEngine(max_tokens=30)
    deltas = [d async for d in engine.generate(prompt(scripted_tokens="10000000"))]
    assert sum(isinstance(d, TextDelta) for d in deltas) == 30
    assert isinstance(deltas[-1], Finished) and deltas[-1].reason == "stop"


@pytest.mark.parametrize(
    ("metadata", "shape"),
    [
        ({"scripted_delay_ms": "1e12"}, (2.0, 7)),  # clamped to the maximum
        ({"scripted_delay_ms": "-5"}, (0.0, 7)),
        ({"scripted_tokens": "0"}, (0.5, 1)),
        ({"scripted_tokens": "1e12"}, (0.5, 50)),
        ({"scripted_delay_ms": "inf", "scripted_tokens": "-inf"}, (0.5, 7)),  # ignored
        ({"scripted_delay_ms": "nan", "scripted_tokens": "nan"}, (0.5, 7)),
        ({"scripted_delay_ms": "soon", "scripted_tokens": "many"}, (0.5, 7)),
        ({"scripted_delay_ms": "3", "scripted_tokens": "12"}, (0.003, 12)),
    ],
)
def test_metadata_is_clamped_and_non_finite_values_are_ignored(
    metadata: dict[str, str], shape: tuple[float, int]
) -> None:
    engine = ScriptedEngine(delay_s=0.5, tokens=7, max_tokens=50, max_delay_s=2.0)
    assert engine._shape(prompt(**metadata)) == shape


async def test_the_longest_pause_is_cancelled_at_once() -> None:
    """A generation paced at the maximum stops as soon as its task is cancelled (how the
    runner delivers a cancel, a delete and a streaming client that went away)."""
    engine = ScriptedEngine(max_delay_s=3600)

    async def play() -> None:
        async for _ in engine.generate(prompt(scripted_delay_ms="1e15")):
            pass

    task = asyncio.create_task(play())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1)
    assert engine.aborted == ["resp_test"]


async def test_the_engine_keeps_nothing_per_generation_but_its_last_aborts() -> None:
    """A long-running server plays and cancels many scripts: the engine's memory of them
    stays bounded (the ids of its last aborts only)."""
    engine = ScriptedEngine()

    async def play(i: int, *, whole: bool) -> None:
        script = engine.generate(msgspec.structs.replace(prompt(), response_id=f"resp_{i}"))
        async for _ in script:
            if not whole:
                break
        await script.aclose()

    for i in range(200):  # warm
        await play(i, whole=True)
    tracemalloc.start()
    try:
        for i in range(2000):
            await play(i, whole=True)
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert kept < 20_000, f"{kept} bytes kept after 2,000 scripts"
    for i in range(3 * KEPT_ABORTS):
        await play(i, whole=False)
    assert len(engine.aborted) <= 2 * KEPT_ABORTS
    assert engine.aborted[-1] == f"resp_{3 * KEPT_ABORTS - 1}"


async def test_scripted_mode_fail_fails_after_the_script_and_is_not_an_abort() -> None:
    engine = ScriptedEngine()
    got: list[object] = []

    async def play() -> None:
        async for delta in engine.generate(prompt(scripted_mode="fail")):
            got.append(delta)

    with pytest.raises(EngineError, match="scripted_mode=fail") as info:
        await play()
    assert info.value.code == "engine_error"
    assert any(isinstance(d, TextDelta) for d in got)
    assert not any(isinstance(d, Finished) for d in got)
    assert engine.aborted == []


async def test_a_tool_call_fills_only_required_properties_each_of_its_declared_type() -> None:
    """Codex's `exec_command`: `max_output_tokens` is an optional `number` that Codex reads
    as an unsigned integer, so it is left out, and a required number is written as an int."""
    schema = {
        "type": "object",
        "properties": {
            "cmd": {"type": "string"},
            "max_output_tokens": {"type": "number"},
            "yield_time_ms": {"type": ["number", "null"]},
            "lines": {"type": "integer"},
            "login": {"type": "boolean"},
        },
        "required": ["cmd", "yield_time_ms", "lines"],
    }
    tool = OfferedTool(name="exec_command", parameters=schema)
    asked = msgspec.structs.replace(prompt(), tools=[tool])
    deltas = [d async for d in ScriptedEngine(delay_s=0).generate(asked)]
    text = "".join(d.text for d in deltas if isinstance(d, ArgumentsDelta))
    assert text == '{"cmd":"one two","yield_time_ms":2,"lines":2}'
