"""An engine's refusal before any output is the create's 400 (service/responses/modes.py):
which failures are refusals, and what a streamed create holds back and for how long."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from domain.errors import EngineError, InvalidRequest
from domain.events import ResponseFailed, encode
from domain.objects import ResponseError, ResponseObject
from service.ports import Batches, StoredEvent
from service.responses import modes
from service.work.runner import Generation
from tests.unit.domain_helpers import make_response


def failed_with(code: str, said: str | None = None) -> tuple[Generation, ResponseObject]:
    gen = Generation("resp_1")
    gen.failure = EngineError(
        f"sglang at http://10.0.0.1:30000 failed: {said}", code=code, said=said
    )
    final = make_response(status="failed", error=ResponseError(code="server_error", message="x"))
    return gen, final


def test_a_context_refusal_is_openais_400() -> None:
    gen, final = failed_with("context_length_exceeded", "The input (9 tokens) is longer")
    refused = modes.refusal(gen, final)
    assert isinstance(refused, InvalidRequest) and refused.code == "context_length_exceeded"


def test_a_bad_request_says_the_engines_words_but_not_its_address() -> None:
    gen, final = failed_with("engine_bad_request", "top_p must be in (0, 1], got 0.0.")
    refused = modes.refusal(gen, final)
    assert refused is not None and refused.code == "invalid_value"
    assert "top_p must be in (0, 1]" in str(refused) and "10.0.0.1" not in str(refused)


@pytest.mark.parametrize("code", ["engine_stream_error", "engine_timeout", "engine_unavailable"])
def test_other_failures_stay_failed_responses(code: str) -> None:
    gen, final = failed_with(code)
    assert modes.refusal(gen, final) is None


def test_a_refusal_after_output_stays_a_failed_response() -> None:
    gen, final = failed_with("engine_bad_request", "no")
    with_output = msgspec.structs.replace(final, output=[object()])  # type: ignore[list-item]
    assert modes.refusal(gen, with_output) is None


def row(position: int, kind: str, data: bytes = b"{}") -> StoredEvent:
    return StoredEvent("resp_1", position, kind, data, None, 0.0)


async def events(*steps: tuple[float, list[StoredEvent]]) -> Batches:
    for delay, batch in steps:
        await asyncio.sleep(delay)
        yield batch


async def test_a_stream_whose_engine_is_slow_to_start_goes_out_after_the_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(modes, "REFUSAL_HOLD_S", 0.05)
    start = [row(0, "response.created"), row(1, "response.in_progress")]
    out = [row(2, "response.output_item.added")]
    gen = Generation("resp_1")
    loop = asyncio.get_running_loop()
    began = loop.time()
    held = await modes._held(events((0, start), (0.5, out)), gen)
    assert loop.time() - began < 0.3  # did not wait for the first output
    assert [b async for b in held] == [start, out]


async def test_a_stream_with_output_goes_out_at_its_first_output() -> None:
    start = [row(0, "response.created"), row(1, "response.in_progress")]
    out = [row(2, "response.output_item.added")]
    gen = Generation("resp_1")
    held = await modes._held(events((0, start), (0.01, out)), gen)
    assert [b async for b in held] == [start, out]


async def test_a_refused_stream_is_the_400_and_sends_nothing() -> None:
    gen, final = failed_with("context_length_exceeded", "too long")
    failed = ResponseFailed(sequence_number=2, response=final)
    start = [row(0, "response.created"), row(1, "response.in_progress")]
    end = [row(2, "response.failed", encode(failed).data)]
    with pytest.raises(InvalidRequest):
        await modes._held(events((0, start), (0.01, end)), gen)
