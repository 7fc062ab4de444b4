"""The shared HTTP layer: error bodies of every shape reduced to their message, statuses to
codes, and server-sent events split whatever the network chunks."""

from __future__ import annotations

import json

import pytest

from adapters.engines._http import Timeouts, deadline, error_detail, sse_events, status_error


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"error": {"message": "Unknown sampling parameter(s): max_tokens"}}, "Unknown sampling"),
        ({"error": "Unauthorized"}, "Unauthorized"),
        (
            {"object": "error", "message": "too long", "type": "Bad Request", "code": 400},
            "too long",
        ),
        ({"detail": "Not Found"}, "Not Found"),
    ],
)
def test_json_error_bodies(body: object, message: str) -> None:
    assert error_detail(json.dumps(body).encode()).startswith(message)


def test_a_plain_text_body_is_its_own_message() -> None:
    assert error_detail(b"Internal Server Error") == "Internal Server Error"


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "engine_bad_request"),
        (401, "engine_unauthorized"),
        (404, "engine_bad_request"),
        (429, "engine_overloaded"),
        (500, "engine_http_error"),
        (503, "engine_overloaded"),
    ],
)
def test_statuses_map_to_codes(status: int, code: str) -> None:
    error = status_error("sglang", status, b'{"error": {"message": "no"}}')
    assert error.code == code
    assert f"HTTP {status}: no" in error.message


async def test_sse_events_are_split_whatever_the_network_chunks() -> None:
    pieces = [
        b"data: a\r",
        b"\n\r\ndata: b\n",
        b"data: c\n\n",
        b": ping\n\nevent: x\ndata: d\n\n",
        b"data: e",
    ]

    remaining = iter(pieces)

    async def read() -> bytes:
        return next(remaining, b"")

    events = [e async for e in sse_events(read, "engine", deadline(Timeouts()))]
    assert events == [b"a", b"b\nc", b"d", b"e"]
