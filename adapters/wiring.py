"""The composition of a process: the database (store, writer, keys, leases) and the engine
that settings name, the bundle of ports over them, and `running_process`, which owns a
running process's parts from start-up to an orderly stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from adapters.engines.openai_chat import OpenAIChatEngine
from adapters.engines.scripted import ScriptedEngine
from adapters.engines.sglang import SglangEngine
from adapters.sealing import AesGcmSealer
from adapters.store.conversations import SqlConversations
from adapters.store.factory import audit_ports, open_store
from adapters.store.keys import SqlApiKeyStore
from adapters.store.leases import SqlLeases
from adapters.store.migrate import NotMigrated
from adapters.store.prompts import SqlPrompts
from adapters.store.sql import SqlEventStore
from adapters.store.writer import GroupCommitWriter
from domain.errors import InvalidRequest, StoreError
from service.bundle import Bundle
from service.observe import Tracer, WorkObserver
from service.ports import Engine, LogObserver
from service.reasoning.sealing import SealedReasoning
from service.reasoning.summaries import ReasoningSummaries
from service.settings import Settings
from service.tools.mcploop import ToolLimits, ToolLoop
from service.webhooks.delivery import Deliverer, WebhookObserver
from service.work.background import Background
from service.work.leases import LeaseKeeper
from service.work.runner import Runner

log = logging.getLogger("resplog.wiring")

# What `/ready` says, which needs no key: the fix, without the URL, user or host that the
# start-up error names (an operator finds those in the server's log).
READY_WITHIN = 1.0  # seconds: /ready answers within this, whatever the database does
NOT_AT_HEAD = "the database schema is not at the version this server needs; run `resplog migrate`"


def process_identity() -> str:
    """This process's name on the leases it holds: host, pid, and a random part (a pid is
    reused; the identity must not be)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class SqlDatabase:
    """The SQL store (PostgreSQL or SQLite) with its group-commit writer, API keys and
    leases: the adapters behind the bundle's database ports."""

    def __init__(self, store: SqlEventStore, writer: GroupCommitWriter) -> None:
        self.store = store
        self.writer = writer
        self.keys = SqlApiKeyStore(store)
        self.leases = SqlLeases(store)

    async def aclose(self) -> None:
        try:
            await self.writer.close()  # commits what it still holds
        finally:
            await self.store.close()

    async def ready(self) -> str | None:
        """None when ready, else what is wrong, within `READY_WITHIN` seconds: a probe must
        answer even when the database hangs (frozen, partitioned) instead of hanging too."""
        try:
            async with asyncio.timeout(READY_WITHIN):
                if not await self.store.ping():
                    return "database unreachable"
                await self.store.check_migrated()
        except TimeoutError:
            return "database not answering"
        except NotMigrated as exc:
            log.warning("not ready: %s", exc)
            return NOT_AT_HEAD
        except StoreError as exc:
            log.warning("not ready: %s", exc)
            return "database unreachable"
        return None


async def open_database(
    settings: Settings, *, identity: str | None = None, **store: Any
) -> SqlDatabase:
    """The database `settings` names, refused unless migrated (`NotMigrated` names the fix),
    with its writer started. `identity` names this process on its leases (default: a fresh
    one); `store` are further `StoreSettings` (tests poll faster, for one)."""
    sql = await open_store(
        settings.database_url,
        lease_owner=identity or process_identity(),
        lease_ttl=settings.lease_ttl_s,
        session_url=settings.session_database_url,
        replica_url=settings.replica_database_url,
        **{
            "connect_timeout": settings.db_connect_timeout_s,
            "statement_timeout": settings.db_statement_timeout_s,
            **store,
        },
    )
    writer = GroupCommitWriter(sql, flush_interval=settings.flush_interval_ms / 1000)
    await writer.start()
    return SqlDatabase(sql, writer)


def assemble(settings: Settings, database: SqlDatabase, engine: Engine) -> Bundle:
    """The bundle of one process over its database and engine (nothing is started)."""
    sealer, _ = AesGcmSealer.from_setting(settings.reasoning_key)
    engine = SealedReasoning(ReasoningSummaries(engine, settings.reasoning_summary_tokens), sealer)
    tools = None
    if settings.mcp_tools == "on":
        from adapters.tools import McpToolServers
        from adapters.tools.hosts import HostPolicy

        limits = ToolLimits(
            call_timeout_s=settings.mcp_call_timeout_s,
            loop_timeout_s=settings.mcp_loop_timeout_s,
            max_output_bytes=settings.mcp_max_output_bytes,
            max_list_bytes=settings.mcp_max_list_bytes,
            idempotent=settings.mcp_idempotent_tools,
        )
        servers = McpToolServers(
            HostPolicy.parse(settings.mcp_hosts),
            trusted=frozenset([settings.tool_server] if settings.tool_server else []),
        )
        tools = ToolLoop(servers, sealer, limits, settings.tool_server)
    runner = Runner(database.writer, engine, tools=tools)
    keeper = LeaseKeeper(
        database.leases, runner, slots=settings.workers, renew_every=settings.lease_ttl_s / 3
    )
    return Bundle(
        database=database,
        store=database.store,
        writer=database.writer,
        index=database.store,
        leases=database.leases,
        bells=database.leases,
        keys=database.keys,
        engine=engine,
        conversations=SqlConversations(database.store),
        prompts=SqlPrompts(database.store),
        runner=runner,
        keeper=keeper,
        audit=audit_ports(database.store),
        cancel_wait_s=settings.cancel_wait_s,
        sealer=sealer,
        reasoning_events=settings.reasoning_events,
        context_window=settings.context_window,
    )


@contextlib.asynccontextmanager
async def open_bundle(
    settings: Settings, *, database: SqlDatabase | None = None, engine: Engine | None = None
) -> AsyncIterator[Bundle]:
    """A bundle over the database and engine that `settings` name (or those given, which it
    then owns). On exit, generations still running are ended, then the engine and the
    database are closed, the database last: the runner's final events go through it."""
    async with contextlib.AsyncExitStack() as stack:
        db = database or await open_database(settings)
        stack.push_async_callback(db.aclose)
        eng = engine or await build_engine(settings)
        stack.push_async_callback(eng.aclose)
        bundle = assemble(settings, db, eng)
        stack.push_async_callback(bundle.runner.shutdown, 0.0)
        yield bundle


class Measures(LogObserver, WorkObserver, WebhookObserver, Protocol):
    """A process's metrics: told of its flushes and its background work, and reading the
    leases it holds and the tails it has open."""

    def watch(
        self, held: Callable[[], int], tails: Callable[[], int], models: Callable[[], list[str]]
    ) -> None: ...


class Process:
    """A running process: its bundle, and how to begin its orderly stop."""

    def __init__(
        self,
        bundle: Bundle,
        background: Background,
        grace_s: float,
        deliverer: Deliverer | None = None,
    ) -> None:
        self.bundle = bundle
        self.deliverer = deliverer
        self._background = background
        self._grace_s = grace_s
        self._loop = asyncio.get_running_loop()
        # Set once the process begins its orderly stop: what holds a connection open (a
        # WebSocket: adapters/http/sockets.py) lets its running responses end, then closes.
        self.stopping = asyncio.Event()

    def observe_log(self, observer: LogObserver) -> None:
        """Tell `observer` of every flush of this process's log writer (metrics)."""
        writer = self.bundle.writer
        if isinstance(writer, GroupCommitWriter):
            writer.observer = observer

    def observe_work(self, observer: WorkObserver) -> None:
        """Tell `observer` of this process's claims, lost leases, sweeps and engine errors."""
        self.bundle.runner.observer = observer

    def measure(self, metrics: Measures) -> None:
        """Count this process's work in `metrics` (adapters/metrics)."""
        self.observe_log(metrics)
        self.observe_work(metrics)
        if self.deliverer is not None:
            self.deliverer.observer = metrics
        metrics.watch(self.leases_held, self.live_tails, self.bundle.engine.models)

    def trace(self, tracer: Tracer) -> None:
        """Trace every generation of this process with `tracer` (adapters/otel)."""
        self.bundle.runner.tracer = tracer

    def leases_held(self) -> int:
        """Every generation running here holds its response's lease."""
        return len(self.bundle.runner.running())

    def live_tails(self) -> int:
        store = self.bundle.store
        return store.hub.tails() if isinstance(store, SqlEventStore) else 0

    def begin_shutdown(self) -> None:
        """Stop claiming work and give running generations the grace period, now. Safe
        from a signal handler (it only schedules the drain on the process's loop)."""
        self._loop.call_soon_threadsafe(self._begin_shutdown)

    def _begin_shutdown(self) -> None:
        self.stopping.set()
        self._background.begin_drain(self._grace_s)


@contextlib.asynccontextmanager
async def running_process(
    settings: Settings,
    *,
    database: SqlDatabase | None = None,
    engine: Engine | None = None,
    attach: Callable[[Process], None] = lambda process: None,
) -> AsyncIterator[Process]:
    """Everything a `serve` or `worker` process runs: the database (refused unless
    migrated) and the engine (refused unless it answers), checked and opened once, in that
    order; `attach` (what watches the process: metrics, traces) told of it; the runner, the
    lease keeper, the claim loop and the sweeper, started. On exit: drain (stop claiming,
    `shutdown_grace_s` for running generations, the rest `failed`), then close the engine
    and the database."""
    async with open_bundle(settings, database=database, engine=engine) as bundle:
        background = Background(
            bundle, lease_ttl=settings.lease_ttl_s, claim_poll_s=settings.claim_poll_s
        )
        deliverer = webhook_deliverer(settings, bundle)
        process = Process(bundle, background, settings.shutdown_grace_s, deliverer)
        attach(process)  # before the start-up sweep and the first claims, which it counts
        await background.start()
        if deliverer is not None:
            deliverer.start()
        try:
            yield process
        finally:
            if deliverer is not None:  # its attempts in flight get the grace period too
                await asyncio.gather(
                    deliverer.stop(settings.shutdown_grace_s),
                    background.drain(settings.shutdown_grace_s),
                )
            else:
                await background.drain(settings.shutdown_grace_s)


def webhook_deliverer(settings: Settings, bundle: Bundle) -> Deliverer | None:
    """This process's deliverer of webhooks (service/webhooks/delivery.py), leasing as
    the process's generations do; None where the store keeps no webhooks."""
    from adapters.tools.hosts import HostPolicy
    from adapters.webhooks.sender import HttpSender

    store = bundle.audit.webhooks
    if store is None or not isinstance(bundle.store, SqlEventStore):
        return None
    return Deliverer(
        store,
        HttpSender(
            HostPolicy.parse(settings.webhook_hosts), connections=settings.webhook_concurrency
        ),
        bundle.sealer,
        worker=bundle.store.settings.lease_owner or process_identity(),
        backoff_s=settings.webhook_backoff_s,
        max_age_s=settings.webhook_max_age_h * 3600,
        timeout_s=settings.webhook_timeout_s,
        lease_s=settings.lease_ttl_s,
        disable_after_s=settings.webhook_disable_after_h * 3600,
        per_endpoint=settings.webhook_concurrency,
        poll_s=settings.webhook_poll_s,
    )


async def build_engine(settings: Settings) -> Engine:
    """The engine `settings` names, started (an unreachable upstream is an EngineError)."""
    if settings.engine == "scripted":
        return ScriptedEngine(
            delay_s=settings.scripted_delay_ms / 1000,
            tokens=settings.scripted_tokens,
            max_tokens=settings.scripted_max_tokens,
            max_delay_s=settings.scripted_max_delay_ms / 1000,
            model=settings.model or "scripted",
            only_model=settings.model is not None,
        )
    if not settings.engine_url:
        raise InvalidRequest(f"--engine {settings.engine} needs --engine-url")
    engine: SglangEngine | OpenAIChatEngine
    if settings.engine == "sglang":
        engine = SglangEngine(
            settings.engine_url,
            model=settings.model,
            api_key=settings.engine_api_key,
            admin_key=settings.engine_admin_key,
        )
    elif settings.engine == "openai-chat":
        from adapters.tools.hosts import HostPolicy
        from adapters.tools.images import ImageHosts

        engine = OpenAIChatEngine(
            settings.engine_url,
            model=settings.model,
            api_key=settings.engine_api_key,
            extra_body=settings.engine_extra_body or None,
            check_images=ImageHosts(HostPolicy.parse(settings.mcp_hosts)).check,
        )
    else:
        raise InvalidRequest(f"unknown engine {settings.engine!r}")
    try:
        await engine.start()
    except BaseException:
        await engine.aclose()
        raise
    return engine
