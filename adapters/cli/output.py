"""What the admin commands print: JSON, tables for people, and the progress bar (rich, on
stderr)."""

from __future__ import annotations

from types import TracebackType
from typing import Any

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


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`1 response`, `2 responses`: summaries read as English."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def print_json(value: Any) -> None:
    click.echo(msgspec.json.format(msgspec.json.encode(value), indent=2).decode())


def print_columns(header: list[str], rows: list[list[str]]) -> None:
    """The one table style of every listing (`responses list`, `keys list`, `gc --dry-run`):
    upper-case headers, columns two spaces apart, an empty cell as `-`, and nothing ever cut
    or folded to the terminal's width, so an id can be pasted into the next command (a
    long line wraps in the terminal instead)."""
    cells = [header, *([cell or "-" for cell in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


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

    def stream(self, n: int = 1) -> None:
        self.progress.advance(self.task, n)

    def event(self, n: int = 1) -> None:
        self.events += n
        if self.events % 1000 < n:
            self.progress.update(self.task, events=self.events)

    def done(self) -> None:
        self.progress.update(self.task, events=self.events)
