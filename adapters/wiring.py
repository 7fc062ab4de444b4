"""Builds concrete adapters from settings: the store backend and the engine."""

from __future__ import annotations

from adapters.engines.openai_chat import OpenAIChatEngine
from adapters.engines.scripted import ScriptedEngine
from adapters.engines.sglang import SglangEngine
from adapters.store import GroupCommitWriter, SqlApiKeyStore, SqlEventStore, open_store
from adapters.store.migrate import NotMigrated
from domain.errors import InvalidRequest
from service.ports import Engine
from service.settings import Settings


class SqlBackend:
    """The SQL store (PostgreSQL or SQLite) with its group-commit writer."""

    def __init__(self, store: SqlEventStore, writer: GroupCommitWriter) -> None:
        self.store = self.index = store
        self.writer = writer
        self.keys = SqlApiKeyStore(store)

    async def start(self) -> None:
        await self.writer.start()

    async def close(self) -> None:
        try:
            await self.writer.close()
        finally:
            await self.store.close()

    async def ready(self) -> str | None:
        if not await self.store.ping():
            return "database unreachable"
        try:
            await self.store.check_migrated()
        except NotMigrated as exc:
            return str(exc)
        return None


async def open_backend(settings: Settings) -> SqlBackend:
    store = await open_store(settings.database_url)
    writer = GroupCommitWriter(store, flush_interval=settings.flush_interval_ms / 1000)
    return SqlBackend(store, writer)


async def build_engine(settings: Settings) -> Engine:
    """The engine `settings` names, started (an unreachable upstream is an EngineError)."""
    if settings.engine == "scripted":
        return ScriptedEngine(
            delay_s=settings.scripted_delay_ms / 1000,
            tokens=settings.scripted_tokens,
            model=settings.model or "scripted",
        )
    if not settings.engine_url:
        raise InvalidRequest(f"--engine {settings.engine} needs --engine-url")
    engine: SglangEngine | OpenAIChatEngine
    if settings.engine == "sglang":
        engine = SglangEngine(
            settings.engine_url, model=settings.model, api_key=settings.engine_api_key
        )
    elif settings.engine == "openai-chat":
        engine = OpenAIChatEngine(
            settings.engine_url,
            model=settings.model,
            api_key=settings.engine_api_key,
            extra_body=settings.engine_extra_body or None,
        )
    else:
        raise InvalidRequest(f"unknown engine {settings.engine!r}")
    try:
        await engine.start()
    except BaseException:
        await engine.aclose()
        raise
    return engine


async def ensure_migrated(url: str) -> None:
    """Refuse to serve a database that is not at head (the error names the fix)."""
    store = await open_store(url, listen=False)
    await store.close()


async def check_engine(settings: Settings) -> None:
    """Refuse to serve when the configured engine cannot be reached at start-up."""
    engine = await build_engine(settings)
    close = getattr(engine, "aclose", None)
    if close is not None:
        await close()
