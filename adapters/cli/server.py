"""`resplog migrate` and `resplog serve`: the database schema and the HTTP API server."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

import click

from adapters.cli.access_flags import access_options, access_settings, announce
from adapters.cli.common import database_option, log, main, redact
from adapters.cli.generation import generation_options, generation_settings
from service.settings import Settings


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
@click.option(
    "--reasoning-events",
    envvar="RESPLOG_REASONING_EVENTS",
    type=click.Choice(["openai", "open-responses"]),
    default="openai",
    show_default=True,
    help="How reasoning text events are named: OpenAI's response.reasoning_text.* (what "
    "the official SDKs parse) or the Open Responses schema's response.reasoning.*. "
    "Recorded in each response's log at creation.",
)
@access_options
def serve(database_url: str, **options: Any) -> None:
    """Run the HTTP API server (and, unless --workers 0, generate background responses)."""
    options["reasoning_events"] = options["reasoning_events"].replace("-", "_")
    access = access_settings(options["host"], options)
    settings = generation_settings(database_url, **options, **access)
    signals: list[int] = []
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(_serve(settings, signals))
    # Stopped by a signal: now that the process drained and closed, let it take its
    # default effect (exit by SIGTERM, KeyboardInterrupt for SIGINT), as uvicorn would.
    for sig in reversed(signals):
        signal.raise_signal(sig)


async def _serve(settings: Settings, signals: list[int]) -> None:
    """Open the process (refused, in one line, if the database is not migrated or the
    engine does not answer), then listen; once the server stopped, drain and close."""
    import uvicorn

    from adapters.cli.protocol import BoundedHttpToolsProtocol
    from adapters.http.app import announce_ready, create_app
    from adapters.http.backpressure import send_deadline
    from adapters.wiring import running_process

    async with running_process(settings) as process:
        if settings.engine == "scripted":
            log.warning("engine: scripted (a deterministic script, not a model; no GPU needed)")
        if settings.workers == 0 and settings.database_url.startswith("sqlite"):
            log.warning("--workers 0 on SQLite: background responses wait for a `resplog worker`")
        await announce(settings.access, process.bundle.keys)
        app = create_app(settings, process=process)
        config = uvicorn.Config(
            send_deadline(app, settings.send_timeout_s),
            host=settings.host,
            port=settings.port,
            log_level="warning",
            lifespan="on",
            http=BoundedHttpToolsProtocol,
            timeout_graceful_shutdown=int(settings.shutdown_grace_s) + 5,
        )
        announce_ready(settings, process)
        log.info(
            "resplog listening on http://%s:%d (database %s)",
            settings.host,
            settings.port,
            redact(settings.database_url),
        )
        await _server(config, signals, on_exit=process.begin_shutdown).serve()


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where it is installed, as uvicorn itself would run."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _server(config: Any, signals: list[int], on_exit: Callable[[], None]) -> Any:
    """uvicorn's server, also telling the process at the first SIGTERM/SIGINT: uvicorn
    itself stops the app only after its connections closed, and those wait for the
    generations. The signals it got are kept in `signals` rather than raised again when it
    stops (as uvicorn does), which would end the process before it drained."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            signals.append(sig)
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            else:
                self.should_exit = True
            on_exit()

    return Server(config)
