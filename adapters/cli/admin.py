"""What the admin commands share: opening the store, folding one response's log, response
ids, times and durations on the command line, JSON output, and the progress bar (rich, on
stderr)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import click
import msgspec
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from adapters.store import SqlEventStore, open_store
from adapters.store.scan import LogScan
from adapters.store.urls import async_url
from domain.errors import CorruptEvent, InvalidRequest, InvalidTransition, NotFound, ResplogError
from service.audit.timeline import Replay
from service.ports import ResponseRow

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

_ID = re.compile(r"resp_[A-Za-z0-9_-]{1,200}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def run(work: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(work)


def response_id(value: str) -> str:
    """A response id as the log names them; anything else is refused in one line."""
    if not _ID.fullmatch(value):
        raise InvalidRequest(f"not a response id: {value!r} (ids look like resp_…)")
    return value


@asynccontextmanager
async def opened(url: str, *, listen: bool = False) -> AsyncIterator[SqlEventStore]:
    """The store at `url`, checked to be migrated; a SQLite file must already exist (a
    reading command must not create an empty database where a path was mistyped)."""
    _refuse_missing_file(url)
    store = await open_store(url, listen=listen)
    try:
        yield store
    finally:
        await store.close()


def _refuse_missing_file(url: str) -> None:
    parsed = async_url(url)
    if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_file():
        raise ResplogError(f"no SQLite database at {parsed.database!r}")


async def replay(scan: LogScan, rid: str) -> tuple[ResponseRow | None, Replay]:
    """The row and the fold of one response's log; a damaged log is one line naming it."""
    record = await scan.record(rid)
    folded = Replay()
    try:
        async for stored in scan.events(rid):
            folded.feed(stored)
    except (InvalidTransition, CorruptEvent) as exc:
        raise ResplogError(f"{exc} (the log is damaged: see resplog verify {rid})") from None
    if record is None and folded.events == 0:
        raise NotFound(f"no response {rid} in this database")
    return record, folded


def parse_duration(text: str) -> float:
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a duration: {text!r} (e.g. 90s, 15m, 12h, 30d, 2w)")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_time(text: str, now: float | None = None) -> float:
    """Unix seconds from an ISO 8601 date or time (UTC unless it says otherwise), unix
    seconds, or a duration meaning that long ago (e.g. 7d)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return (time.time() if now is None else now) - parse_duration(text)
    except ValueError:
        pass
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (e.g. 2025-01-31, 2025-01-31T12:00:00Z, 1738324800, 7d)"
        ) from None
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()


class Duration(click.ParamType[float]):
    name = "DURATION"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class Moment(click.ParamType[float]):
    name = "TIME"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            return parse_time(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(func)


def progress_option(func: F) -> F:
    return click.option(
        "--progress/--no-progress",
        default=None,
        help="Progress bar on stderr (default: when stderr is a terminal).",
    )(func)


def print_json(value: Any) -> None:
    click.echo(msgspec.json.format(msgspec.json.encode(value), indent=2).decode())


def stdout_console() -> Console:
    """Tables for people: the terminal's width, or wide enough not to fold ids in a pipe."""
    console = Console()
    return console if console.is_terminal else Console(width=250)


class Bar:
    """A progress bar over streams on stderr (or nothing, when it is not wanted)."""

    def __init__(self, label: str, total: int | None, show: bool | None) -> None:
        console = Console(stderr=True)
        enabled = console.is_terminal if show is None else show
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[events]} events"),
            TimeElapsedColumn(),
            console=console,
            disable=not enabled,
        )
        self.task: TaskID = self.progress.add_task(label, total=total, events=0)
        self.events = 0

    def __enter__(self) -> Bar:
        self.progress.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if kind is not None:
            # An error is one line on stderr: no final bar above it.
            self.progress.console.quiet = True
        self.progress.stop()

    def stream(self) -> None:
        self.progress.advance(self.task)

    def event(self, n: int = 1) -> None:
        self.events += n
        if self.events % 1000 < n:
            self.progress.update(self.task, events=self.events)

    def done(self) -> None:
        self.progress.update(self.task, events=self.events)
