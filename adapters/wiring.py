"""Builds concrete adapters from settings: the store backend and the engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.engines.scripted import ScriptedEngine
from domain.errors import InvalidRequest
from service.ports import Engine
from service.settings import Settings

if TYPE_CHECKING:
    from adapters.http.app import Backend


async def open_backend(settings: Settings) -> Backend:
    raise NotImplementedError("the SQL store is wired in with the store adapters")


async def build_engine(settings: Settings) -> Engine:
    if settings.engine == "scripted":
        return ScriptedEngine(
            delay_s=settings.scripted_delay_ms / 1000,
            tokens=settings.scripted_tokens,
            model=settings.model or "scripted",
        )
    raise InvalidRequest(f"unknown engine {settings.engine!r}")
