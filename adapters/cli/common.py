"""What every `resplog` command shares: the group, its error handling, common options.

Every option can also come from its `RESPLOG_*` environment variable. Errors print one
line to stderr and exit non-zero: 1 for a failure, 2 for bad usage (click's own).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from domain.errors import ResplogError
from service.settings import DEFAULT_DATABASE_URL

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("resplog")


def database_option(func: F) -> F:
    return click.option(
        "--database-url",
        envvar="RESPLOG_DATABASE_URL",
        default=DEFAULT_DATABASE_URL,
        show_default=True,
        help="SQLAlchemy URL: postgresql+asyncpg://… or sqlite+aiosqlite:///path "
        "(postgresql:// and sqlite:/// mean the same; a relative path is from the working "
        "directory).",
        callback=_checked_url,
    )(func)


def _checked_url(ctx: click.Context, param: click.Parameter, url: str) -> str:
    """A URL resplog cannot use is refused in one line that shows it (password hidden)."""
    from adapters.cli.store import check_url

    try:
        check_url(url)
    # ValueError for another scheme; SQLAlchemy's ArgumentError for what is not a URL at
    # all (only the store may import SQLAlchemy, so it is caught as what it is: an Exception).
    except Exception:
        raise ResplogError(
            f"not a database URL resplog can use: {redact(url)!r}; give "
            "postgresql+asyncpg://user@host/db or sqlite+aiosqlite:///path"
        ) from None
    return url


def checked_optional_url(ctx: click.Context, param: click.Parameter, url: str | None) -> str | None:
    """As `--database-url` is checked, for an optional URL."""
    return None if url is None else _checked_url(ctx, param, url)


def replica_option(func: F) -> F:
    """`--replica-database-url` of the reading commands (`export`, `responses list`)."""
    return click.option(
        "--replica-database-url",
        envvar="RESPLOG_REPLICA_DATABASE_URL",
        default=None,
        metavar="URL",
        callback=checked_optional_url,
        help="PostgreSQL: a hot standby of --database-url to read on, each read once the "
        "standby has replayed the primary's WAL up to where it was when the read began "
        "(else on the primary, in a warning) (docs/guides/high-availability.md).",
    )(func)


class Group(click.Group):
    """Turns resplog's own errors into one line on stderr and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except ResplogError as exc:  # the store's errors too: they say "cannot use the database"
            log.debug("failed", exc_info=exc)
            _fail(str(exc))
        except OSError as exc:  # a file of the command's own (the store translates its own)
            log.debug("file error", exc_info=exc)
            _fail(_one_line(exc))
        except Exception as exc:  # one line for operators; the trace with --log-level debug
            log.debug("unexpected error", exc_info=exc)
            _fail(f"unexpected {type(exc).__name__}: {_one_line(exc)}")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--log-level",
    envvar="RESPLOG_LOG_LEVEL",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@click.option(
    "--log-format",
    envvar="RESPLOG_LOG_FORMAT",
    default="text",
    show_default=True,
    type=click.Choice(["text", "json"]),
    help="json: one JSON object per log line (the request log's fields as keys).",
)
def main(log_level: str, log_format: str) -> None:
    """resplog: a durable OpenAI Responses API server over a replayable event log."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter()
        if log_format == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=log_level.upper(), handlers=[handler])
    # Alembic narrates every step at INFO; operators want the outcome.
    logging.getLogger("alembic").setLevel(max(logging.WARNING, logging.root.level))


class JsonFormatter(logging.Formatter):
    """A log record as one JSON object: time, level, logger, message, and the record's
    `fields` (the request log's method, route, status, …) as keys of their own."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def json_logs() -> bool:
    """Whether `--log-format json` was given (for uvicorn's own lines to follow it)."""
    ctx = click.get_current_context(silent=True)
    return ctx is not None and ctx.find_root().params.get("log_format") == "json"


def redact(url: str) -> str:
    """A URL fit for logs: any password replaced."""
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url
