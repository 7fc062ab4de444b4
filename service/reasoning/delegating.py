"""An engine that passes everything to the engine it wraps: the base of the wrappers that
change one thing about generation (service/reasoning/sealing.py, service/reasoning/summaries.py)."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from domain.generation import AnyDelta, Prompt
from service.ports import Engine


class DelegatingEngine:
    def __init__(self, engine: Engine) -> None:
        self.inner = engine
        self.name = engine.name
        self.media = engine.media

    def models(self) -> list[str]:
        return self.inner.models()

    def serves(self, model: str) -> bool:
        return self.inner.serves(model)

    async def ready(self) -> bool:
        return await self.inner.ready()

    async def aclose(self) -> None:
        await self.inner.aclose()

    def context_window(self, model: str) -> int | None:
        return self.inner.context_window(model)

    async def count_tokens(self, prompt: Prompt) -> int:
        return await self.inner.count_tokens(prompt)

    def generate(self, prompt: Prompt) -> AsyncGenerator[AnyDelta, None]:
        return self.inner.generate(prompt)
