"""`resplog migrate` and `resplog serve`: the database schema and the HTTP API server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click

from adapters.cli.access import access_options, access_settings, announce
from adapters.cli.common import database_option, log, main, redact
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
@click.option(
    "--engine",
    envvar="RESPLOG_ENGINE",
    default="scripted",
    show_default=True,
    type=click.Choice(["scripted", "sglang", "openai-chat"]),
    help="Generation engine; `scripted` plays back a deterministic script (no GPU).",
)
@click.option(
    "--engine-url",
    envvar="RESPLOG_ENGINE_URL",
    default=None,
    help="Base URL of the engine server (sglang, or a /v1/chat/completions server).",
)
@click.option("--engine-api-key", envvar="RESPLOG_ENGINE_API_KEY", default=None)
@click.option(
    "--engine-extra-body",
    envvar="RESPLOG_ENGINE_EXTRA_BODY",
    default=None,
    metavar="JSON",
    help="openai-chat engine: JSON object merged into every upstream request "
    "(e.g. '{\"ignore_eos\": true}' for vLLM).",
)
@click.option(
    "--model",
    envvar="RESPLOG_MODEL",
    default=None,
    help="Model name to serve (default: what the engine reports).",
)
@click.option(
    "--scripted-delay-ms",
    envvar="RESPLOG_SCRIPTED_DELAY_MS",
    default=20.0,
    show_default=True,
    type=float,
    help="Scripted engine: pause between deltas.",
)
@click.option(
    "--scripted-tokens",
    envvar="RESPLOG_SCRIPTED_TOKENS",
    default=None,
    type=int,
    help="Scripted engine: number of answer tokens (default: the script's own).",
)
@click.option(
    "--max-body-bytes",
    envvar="RESPLOG_MAX_BODY_BYTES",
    default=8 * 1024 * 1024,
    show_default=True,
    type=int,
)
@click.option(
    "--flush-interval-ms",
    envvar="RESPLOG_FLUSH_INTERVAL_MS",
    default=5.0,
    show_default=True,
    type=float,
    help="Group-commit interval of the log writer.",
)
@click.option(
    "--shutdown-grace-s",
    envvar="RESPLOG_SHUTDOWN_GRACE_S",
    default=10.0,
    show_default=True,
    type=float,
)
@access_options
def serve(
    database_url: str,
    host: str,
    port: int,
    engine: str,
    engine_url: str | None,
    engine_api_key: str | None,
    engine_extra_body: str | None,
    model: str | None,
    scripted_delay_ms: float,
    scripted_tokens: int | None,
    max_body_bytes: int,
    flush_interval_ms: float,
    shutdown_grace_s: float,
    **access: Any,
) -> None:
    """Run the HTTP API server."""
    import uvicorn

    from adapters.http.app import create_app
    from adapters.http.backpressure import send_deadline
    from adapters.wiring import check_engine, ensure_migrated

    settings = Settings(
        database_url=database_url,
        host=host,
        port=port,
        engine=engine,
        engine_url=engine_url,
        engine_api_key=engine_api_key,
        engine_extra_body=_json_object("--engine-extra-body", engine_extra_body),
        model=model,
        scripted_delay_ms=scripted_delay_ms,
        scripted_tokens=scripted_tokens,
        max_body_bytes=max_body_bytes,
        flush_interval_ms=flush_interval_ms,
        shutdown_grace_s=shutdown_grace_s,
        **access_settings(host, access),
    )
    asyncio.run(ensure_migrated(database_url))
    asyncio.run(check_engine(settings))
    if engine == "scripted":
        log.warning("engine: scripted (a deterministic script, not a model; no GPU needed)")
    announce(settings.access, database_url)
    config = uvicorn.Config(
        send_deadline(create_app(settings), settings.send_timeout_s),
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=int(shutdown_grace_s) + 5,
    )
    log.info("resplog listening on http://%s:%d (database %s)", host, port, redact(database_url))
    uvicorn.Server(config).run()


def _json_object(flag: str, text: str | None) -> dict[str, object]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=flag) from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint=flag)
    return value
