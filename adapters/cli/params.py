"""Command-line values the admin commands share: response ids, times and durations, and
the `--json` and `--progress` options."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from domain.errors import InvalidRequest

F = TypeVar("F", bound=Callable[..., Any])

_ID = re.compile(r"resp_[A-Za-z0-9_-]{1,200}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def response_id(value: str) -> str:
    """A response id as the log names them; anything else is refused in one line."""
    if not _ID.fullmatch(value):
        raise InvalidRequest(f"not a response id: {value!r} (ids look like resp_…)")
    return value


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


class _Seconds(click.ParamType[float]):
    """A command-line value read as seconds by `parse`; a number is taken as it is."""

    def __init__(self, name: str, parse: Callable[[str], float]) -> None:
        self.name = name
        self._parse = parse

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            return self._parse(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


Duration = _Seconds("DURATION", parse_duration)  # how long: 90s, 15m, 12h, 30d, 2w
Moment = _Seconds("TIME", parse_time)  # when: an ISO date or time, unix seconds, or 7d (ago)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(func)


def progress_option(func: F) -> F:
    return click.option(
        "--progress/--no-progress",
        default=None,
        help="Progress bar on stderr (default: when stderr is a terminal).",
    )(func)
