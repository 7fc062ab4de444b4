"""Builds concrete adapters from settings: the store backend and the engine, and the
services and background machinery of a process over them."""

from __future__ import annotations

import os
import secrets
import socket
from typing import Protocol

from adapters.engines.openai_chat import OpenAIChatEngine
from adapters.engines.scripted import ScriptedEngine
from adapters.engines.sglang import SglangEngine
from adapters.store import GroupCommitWriter, SqlApiKeyStore, SqlEventStore, open_store
from adapters.store.leases import SqlLeases
from adapters.store.migrate import NotMigrated
from domain.errors import InvalidRequest
from service.background import Background
from service.leases import LeaseKeeper
from service.ports import Doorbells, Engine, EventStore, EventWriter, Leases, ResponseIndex
from service.responses import Services
from service.runner import Runner
from service.settings import Settings


def process_identity() -> str:
    """This process's name on the leases it holds: host, pid, and a random part (a pid is
    reused; the identity must not be)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class SqlBackend:
    """The SQL store (PostgreSQL or SQLite) with its group-commit writer and leases."""

    def __init__(self, store: SqlEventStore, writer: GroupCommitWriter) -> None:
        self.store = self.index = store
        self.writer = writer
        self.keys = SqlApiKeyStore(store)
        self.leases = self.bells = SqlLeases(store)

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
    store = await open_store(
        settings.database_url, lease_owner=process_identity(), lease_ttl=settings.lease_ttl_s
    )
    writer = GroupCommitWriter(store, flush_interval=settings.flush_interval_ms / 1000)
    return SqlBackend(store, writer)


class BackendParts(Protocol):
    """What the services of a process are built over (a `SqlBackend`, or a test's fake)."""

    @property
    def store(self) -> EventStore: ...

    @property
    def writer(self) -> EventWriter: ...

    @property
    def index(self) -> ResponseIndex: ...

    @property
    def leases(self) -> Leases: ...

    @property
    def bells(self) -> Doorbells: ...


def build_services(
    settings: Settings, backend: BackendParts, engine: Engine
) -> tuple[Services, Background]:
    """The use-cases' services of one process, and its background machinery (not started)."""
    runner = Runner(backend.writer, engine)
    keeper = LeaseKeeper(
        backend.leases, runner, slots=settings.workers, renew_every=settings.lease_ttl_s / 3
    )
    svc = Services(
        store=backend.store,
        writer=backend.writer,
        index=backend.index,
        engine=engine,
        runner=runner,
        leases=backend.leases,
        bells=backend.bells,
        keeper=keeper,
        cancel_wait_s=settings.cancel_wait_s,
    )
    return svc, Background(svc, lease_ttl=settings.lease_ttl_s, claim_poll_s=settings.claim_poll_s)


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
