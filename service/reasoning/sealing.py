"""Reasoning a stateless client carries: `include: ["reasoning.encrypted_content"]`.

A client that does not store responses (`store: false`, Codex CLI's default) still wants the
model to keep its chain of thought across the turns of a tool loop. OpenAI answers such a
request with each reasoning item's content sealed into `encrypted_content`, an opaque blob
the client passes back with the item on its next request. resplog does the same: the blob
is the item's summary and content, sealed under a server key (`--reasoning-key`), and
`SealedReasoning` (an engine decorator) seals what the engine reasons and opens what a
request carries, so every engine sees plain reasoning. A blob that does not open here is
refused at create (service/prompts/seal.py).

The blob's format and the keys are the adapter's (adapters/sealing/aesgcm.py).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol

import msgspec

from domain.generation import (
    AnyDelta,
    Prompt,
    ReasoningDelta,
    ReasoningSealed,
    SummaryDelta,
    Turn,
    any_turn,
)
from domain.objects import (
    InputCompaction,
    InputItem,
    InputMessage,
    InputReasoning,
    InputText,
    ReasoningText,
    SummaryText,
)
from service.ports import Engine
from service.reasoning.delegating import DelegatingEngine

INCLUDE = "reasoning.encrypted_content"


class Sealed(msgspec.Struct, frozen=True):
    """What a blob holds: a reasoning item's summary and content (for a compaction: the
    summary of the conversation as its content, and the response that wrote it)."""

    summary: list[SummaryText]
    content: list[ReasoningText]
    source: str | None = None


class Sealer(Protocol):
    """Seals reasoning into an opaque, authenticated blob, and opens such blobs (the port;
    adapters/sealing has the AES-GCM implementation and the key handling)."""

    def seal(
        self, summary: list[SummaryText], content: list[ReasoningText], source: str | None = None
    ) -> str: ...

    def open(self, blob: str) -> Sealed | None:
        """The reasoning in `blob`, or None if it is not one this server sealed."""
        ...


class SealedReasoning(DelegatingEngine):
    """An engine that opens the reasoning a prompt carries sealed, and seals the reasoning
    it produces when the request asked for it (`include`)."""

    def __init__(self, engine: Engine, sealer: Sealer) -> None:
        super().__init__(engine)
        self.sealer = sealer

    async def count_tokens(self, prompt: Prompt) -> int:
        return await self.inner.count_tokens(self._opened(prompt))

    def generate(self, prompt: Prompt) -> AsyncGenerator[AnyDelta, None]:
        deltas = self.inner.generate(self._opened(prompt))
        return _sealing(deltas, self.sealer) if INCLUDE in prompt.include else deltas

    def _opened(self, prompt: Prompt) -> Prompt:
        history = prompt.history
        if any_turn(history, "sealing.sealed", _holds_sealed):
            history = [msgspec.structs.replace(t, input=self._items(t.input)) for t in history]
        return msgspec.structs.replace(prompt, history=history, input=self._items(prompt.input))

    def _items(self, items: list[InputItem]) -> list[InputItem]:
        return [self._item(i) for i in items]

    def _item(self, item: InputItem) -> InputItem:
        if isinstance(item, InputCompaction):
            return compaction_message(item, self.sealer.open(item.encrypted_content))
        if isinstance(item, InputReasoning) and item.encrypted_content and not item.content:
            found = self.sealer.open(item.encrypted_content)
            if found is not None:
                summary = item.summary or found.summary
                return msgspec.structs.replace(item, summary=summary, content=found.content)
        return item


def _holds_sealed(turn: Turn) -> bool:
    """Whether an input item of `turn` is one `_item` opens (a compaction, or reasoning
    sealed and not given open)."""
    return any(
        isinstance(i, InputCompaction)
        or (isinstance(i, InputReasoning) and bool(i.encrypted_content) and not i.content)
        for i in turn.input
    )


def compaction_message(item: InputCompaction, found: Sealed | None) -> InputItem:
    """What an engine is given for a compaction: its summary, as a developer message in
    the place of the conversation it replaced."""
    summary = "".join(t.text for t in found.content) if found else ""
    text = f"Summary of the conversation before this point:\n{summary}"
    return InputMessage(id=item.id, role="developer", content=[InputText(text=text)])


async def _sealing(
    deltas: AsyncGenerator[AnyDelta, None], sealer: Sealer
) -> AsyncGenerator[AnyDelta, None]:
    """The engine's deltas with a `ReasoningSealed` ending each reasoning item."""
    summary: list[str] | None = None
    content: list[str] = []
    try:
        async for delta in deltas:
            if isinstance(delta, ReasoningDelta | SummaryDelta):
                if summary is None:
                    summary, content = [], []
                (summary if isinstance(delta, SummaryDelta) else content).append(delta.text)
            elif summary is not None:  # the item ends here (a Finished ends it too)
                yield ReasoningSealed(encrypted_content=_blob(sealer, summary, content))
                summary = None
            yield delta
    finally:
        await deltas.aclose()


def _blob(sealer: Sealer, summary: list[str], content: list[str]) -> str:
    return sealer.seal(
        [SummaryText(text="".join(summary))] if summary else [],
        [ReasoningText(text="".join(content))] if content else [],
    )
