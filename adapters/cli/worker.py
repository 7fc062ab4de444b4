"""`resplog worker`: a generation process with no HTTP API. It claims queued background
responses from the database, generates them under a lease, recovers the responses of
crashed processes, and shuts down gracefully on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import TYPE_CHECKING, Any

import click

from adapters.cli.common import database_option, log, main, redact
from adapters.cli.generation import generation_options, generation_settings
from service.ports import Engine
from service.settings import Settings

if TYPE_CHECKING:
    from adapters.wiring import SqlBackend


@main.command()
@database_option
@generation_options
def worker(database_url: str, **options: Any) -> None:
    """Generate queued background responses (no HTTP API), beside `serve` replicas."""
    from adapters.wiring import check_engine, ensure_migrated

    settings = generation_settings(database_url, **options)
    if settings.workers < 1:
        raise click.BadParameter("a worker needs at least one slot", param_hint="--workers")
    asyncio.run(ensure_migrated(database_url))
    asyncio.run(check_engine(settings))
    asyncio.run(run_worker(settings))


async def run_worker(settings: Settings) -> None:
    """Run until SIGTERM or SIGINT, then drain (see `service.background`)."""
    from adapters.wiring import build_engine, open_backend

    backend = await open_backend(settings)
    try:
        await backend.start()
        engine = await build_engine(settings)
        try:
            await _serve(settings, backend, engine)
        finally:
            close = getattr(engine, "aclose", None)
            if close is not None:
                await close()
    finally:
        await backend.close()


async def _serve(settings: Settings, backend: SqlBackend, engine: Engine) -> None:
    from adapters.wiring import build_services

    _svc, background = build_services(settings, backend, engine)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await background.start()
    log.info(
        "resplog worker: %d slots, engine %s, database %s",
        settings.workers,
        engine.name,
        redact(settings.database_url),
    )
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        await background.drain(settings.shutdown_grace_s)
    log.info("resplog worker stopped")
