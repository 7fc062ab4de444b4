"""Times and durations as the admin commands take them (`--since`, `--older-than`, ...)."""

from __future__ import annotations

import pytest

from adapters.cli.params import parse_duration, parse_time, response_id
from domain.errors import InvalidRequest


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("90s", 90),
        ("15m", 900),
        ("12h", 43200),
        ("2d", 172800),
        ("1w", 604800),
        ("1.5h", 5400),
    ],
)
def test_durations_take_a_unit(text: str, seconds: float) -> None:
    """s, m, h, d, w; a bare number is seconds."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1738324800", 1738324800.0),
        ("2025-01-31", 1738281600.0),
        ("2025-01-31T12:00:00Z", 1738324800.0),
        ("2025-01-31T13:00:00+01:00", 1738324800.0),
        ("7d", 1_000_000.0 - 7 * 86400),
    ],
)
def test_times_are_iso_unix_or_that_long_ago(text: str, expected: float) -> None:
    """ISO 8601 (UTC unless it says otherwise), unix seconds, or a duration ago."""
    assert parse_time(text, now=1_000_000.0) == expected


def test_nonsense_is_refused_with_examples() -> None:
    """A bad value says what would be accepted."""
    with pytest.raises(ValueError, match=r"e\.g\."):
        parse_time("yesterday")
    with pytest.raises(ValueError, match=r"e\.g\."):
        parse_duration("3 fortnights")


def test_response_ids_are_checked_before_any_query() -> None:
    """Anything that is not a response id is one clear error."""
    assert response_id("resp_abc123") == "resp_abc123"
    for bad in ("abc", "resp_", "resp_a b", "msg_abc"):
        with pytest.raises(InvalidRequest, match="not a response id"):
            response_id(bad)
