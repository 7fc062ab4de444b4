"""`resplog migrate` and `resplog serve`: the database schema and the HTTP API server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import FrameType
from typing import Any

import click

from adapters.cli.access_flags import access_options, access_settings, announce
from adapters.cli.common import database_option, log, main, redact
from adapters.cli.generation import generation_options, generation_settings


@main.command()
@database_option
def migrate(database_url: str) -> None:
    """Upgrade the database to the newest schema (PostgreSQL or SQLite)."""
    from adapters.store.migrate import upgrade

    upgrade(database_url)
    click.echo(f"database at head: {redact(database_url)}")


@main.command()
@database_option
@click.option("--host", envvar="RESPLOG_HOST", default="127.0.0.1", show_default=True)
@click.option("--port", envvar="RESPLOG_PORT", default=8000, show_default=True, type=int)
@generation_options
@click.option(
    "--max-body-bytes",
    envvar="RESPLOG_MAX_BODY_BYTES",
    default=8 * 1024 * 1024,
    show_default=True,
    type=int,
)
@access_options
def serve(database_url: str, **options: Any) -> None:
    """Run the HTTP API server (and, unless --workers 0, generate background responses)."""
    import uvicorn

    from adapters.http.app import begin_shutdown, create_app
    from adapters.http.backpressure import send_deadline
    from adapters.wiring import check_engine, ensure_migrated

    access = access_settings(options["host"], options)
    settings = generation_settings(database_url, **options, **access)
    asyncio.run(ensure_migrated(database_url))
    asyncio.run(check_engine(settings))
    if settings.engine == "scripted":
        log.warning("engine: scripted (a deterministic script, not a model; no GPU needed)")
    if settings.workers == 0 and database_url.startswith("sqlite"):
        log.warning("--workers 0 on SQLite: background responses wait for a `resplog worker`")
    announce(settings.access, database_url)
    app = create_app(settings)
    config = uvicorn.Config(
        send_deadline(app, settings.send_timeout_s),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=int(settings.shutdown_grace_s) + 5,
    )
    log.info(
        "resplog listening on http://%s:%d (database %s)",
        settings.host,
        settings.port,
        redact(database_url),
    )
    _server(config, on_exit=lambda: begin_shutdown(app)).run()


def _server(config: Any, on_exit: Callable[[], None]) -> Any:
    """uvicorn's server, also telling the app at the first SIGTERM/SIGINT: uvicorn itself
    stops the app only after its connections closed, and those wait for the generations."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            super().handle_exit(sig, frame)
            on_exit()

    return Server(config)
