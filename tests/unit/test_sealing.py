"""Reasoning sealed for stateless clients: the AES-GCM sealer and the engine decorator
(service/reasoning/sealing.py, adapters/sealing/aesgcm.py)."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncGenerator

import pytest

from adapters.sealing import AesGcmSealer
from domain.errors import InvalidRequest
from domain.generation import (
    AnyDelta,
    EndItem,
    Finished,
    Prompt,
    ReasoningDelta,
    ReasoningSealed,
    SummaryDelta,
    TextDelta,
    TokenUsage,
)
from domain.objects import InputReasoning, ReasoningText, SummaryText
from service.prompts.seal import check_sealed
from service.reasoning.sealing import INCLUDE, SealedReasoning
from tests.fakes.prompts import make_prompt
from tests.unit.domain_helpers import Stream

KEY, OTHER = os.urandom(32), os.urandom(32)
THOUGHT = [ReasoningText(text="I should call the tool.")]


def test_a_blob_opens_with_its_key_and_with_no_other() -> None:
    sealer = AesGcmSealer([KEY])
    blob = sealer.seal([SummaryText(text="s")], THOUGHT)
    assert blob.startswith("rsv1.")
    opened = sealer.open(blob)
    assert opened is not None and opened.content == THOUGHT
    assert opened.summary == [SummaryText(text="s")]
    assert AesGcmSealer([OTHER]).open(blob) is None
    assert sealer.seal([], THOUGHT) != sealer.seal([], THOUGHT)  # a fresh nonce each time


@pytest.mark.parametrize("cut", [5, 20, -1])
def test_a_tampered_or_foreign_blob_does_not_open(cut: int) -> None:
    sealer = AesGcmSealer([KEY])
    blob = sealer.seal([], THOUGHT)
    flipped = blob[:cut] + ("A" if blob[cut] != "A" else "B") + blob[cut + 1 :]
    assert sealer.open(flipped) is None
    assert sealer.open("gAAAAABoOpenAIsOwnBlob") is None
    assert sealer.open("rsv1.!!!") is None


def test_keys_rotate_new_first_old_still_opens() -> None:
    old = AesGcmSealer([KEY]).seal([], THOUGHT)
    rotated = AesGcmSealer([OTHER, KEY])
    assert rotated.open(old) is not None
    assert AesGcmSealer([OTHER]).open(rotated.seal([], THOUGHT)) is not None


def test_the_setting_is_base64_keys_of_32_bytes() -> None:
    two = ",".join(base64.b64encode(k).decode() for k in (KEY, OTHER))
    sealer, made = AesGcmSealer.from_setting(two)
    assert not made and sealer.open(AesGcmSealer([OTHER]).seal([], THOUGHT)) is not None
    assert AesGcmSealer.from_setting(None)[1] is True
    for bad in ("not base64!", base64.b64encode(b"short").decode()):
        with pytest.raises(ValueError, match=r"base64|32 bytes"):
            AesGcmSealer.from_setting(bad)


class _Engine:
    name = "fake"
    media: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.seen: list[Prompt] = []

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

    async def count_tokens(self, prompt: Prompt) -> int:
        self.seen.append(prompt)
        return 1

    async def generate(self, prompt: Prompt) -> AsyncGenerator[AnyDelta, None]:
        self.seen.append(prompt)
        for d in (
            ReasoningDelta(text="think "),
            SummaryDelta(text="sum"),
            ReasoningDelta(text="more"),
            TextDelta(text="answer"),
            Finished(reason="stop", usage=TokenUsage()),
        ):
            yield d


async def test_the_decorator_seals_reasoning_only_when_asked_and_opens_what_comes_back() -> None:
    sealer = AesGcmSealer([KEY])
    inner = _Engine()
    engine = SealedReasoning(inner, sealer)
    plain = [d async for d in engine.generate(make_prompt())]
    assert not any(isinstance(d, ReasoningSealed) for d in plain)
    asked = make_prompt()
    asked = Prompt(
        **{**{f: getattr(asked, f) for f in asked.__struct_fields__}, "include": [INCLUDE]}
    )
    got = [d async for d in engine.generate(asked)]
    sealed = [d for d in got if isinstance(d, ReasoningSealed)]
    assert len(sealed) == 1 and isinstance(got[3], ReasoningSealed)  # before the answer
    opened = sealer.open(sealed[0].encrypted_content)
    assert opened is not None
    assert opened.content == [ReasoningText(text="think more")]
    assert opened.summary == [SummaryText(text="sum")]
    back = InputReasoning(id="rs_1", encrypted_content=sealed[0].encrypted_content)
    await engine.count_tokens(make_prompt([back]))
    given = inner.seen[-1].input[0]
    assert isinstance(given, InputReasoning) and given.content == opened.content
    check_sealed(sealer, [back])
    with pytest.raises(InvalidRequest) as caught:
        check_sealed(AesGcmSealer([OTHER]), [back])
    assert caught.value.code == "invalid_encrypted_content"


def test_the_log_takes_a_reasoning_item_closed_with_its_sealed_content() -> None:
    s = Stream.new()
    s.emit(ReasoningDelta(text="hmm"), ReasoningSealed(encrypted_content="rsv1.x"), EndItem())
    s.emit(TextDelta(text="hi"))
    s.finish()
    final = s.state.response
    assert final is not None
    assert final.output[0].encrypted_content == "rsv1.x"  # type: ignore[union-attr]
    assert final.output[0].status == "completed"
