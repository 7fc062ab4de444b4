"""`resplog worker`: a generation process with no HTTP API. It claims queued background
responses from the database, generates them under a lease, recovers the responses of
crashed processes, and shuts down gracefully on SIGTERM. With `--metrics-port`, it serves
its own `GET /metrics` (adapters/cli/worker_metrics.py)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from typing import TYPE_CHECKING, Any

import click

from adapters.cli.access_flags import metrics_options, metrics_settings
from adapters.cli.common import database_option, log, main, redact
from adapters.cli.generation import generation_options, generation_settings
from adapters.cli.memory import freeze_startup_heap, return_freed_memory
from adapters.cli.server import listen
from adapters.cli.store import refuse_missing_file
from adapters.cli.tracing import open_tracer, otel_option, watching
from service.settings import Settings

if TYPE_CHECKING:
    from adapters.wiring import Process


@main.command()
@database_option
@generation_options
@metrics_options
@otel_option
def worker(database_url: str, **options: Any) -> None:
    """Generate queued background responses (no HTTP API), beside `serve` replicas."""
    refuse_missing_file(database_url)
    port, host = options.pop("metrics_port"), options.pop("metrics_host")
    access = metrics_settings(host, options.pop("metrics"), options.pop("metrics_key"))
    settings = generation_settings(database_url, **options, **access)
    if settings.workers < 1:
        raise click.BadParameter("a worker needs at least one slot", param_hint="--workers")
    return_freed_memory()
    # Bound before anything starts: a port in use is one error line.
    sock = None if port is None else listen(host, port)
    asyncio.run(run_worker(settings, sock))


async def run_worker(settings: Settings, metrics_sock: socket.socket | None = None) -> None:
    """Run until SIGTERM or SIGINT, then drain (see `service.work.background`); serve the
    metrics on `metrics_sock` meanwhile, when given."""
    from adapters.cli.worker_metrics import metrics_port, worker_metrics
    from adapters.wiring import running_process

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    tracer = open_tracer(settings)
    metrics = worker_metrics(metrics_sock)
    try:
        async with (
            running_process(settings, attach=watching(tracer, metrics)) as process,
            metrics_port(settings, metrics, metrics_sock),
        ):
            await _until_stopped(settings, process, stop, loop)
    finally:
        if tracer is not None:  # after the drain: the generations' last spans are ended
            tracer.shutdown()
    log.info("resplog worker stopped")


async def _until_stopped(
    settings: Settings, process: Process, stop: asyncio.Event, loop: asyncio.AbstractEventLoop
) -> None:
    """Announce the worker, then wait for SIGTERM or SIGINT."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    freeze_startup_heap()
    log.info(
        "resplog worker: %d slots, engine %s, database %s",
        settings.workers,
        process.bundle.engine.name,
        redact(settings.database_url),
    )
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
