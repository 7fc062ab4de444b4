"""Errors as HTTP: a database that cannot be reached is a clear 503, never a 500; any other
store error is a 500 that names nothing of the database."""

from __future__ import annotations

from litestar import Litestar, get
from litestar.testing import TestClient

from adapters.http import errors
from domain.errors import StoreError, StoreUnavailable

RAISED: list[Exception] = []


@get("/boom")
async def boom() -> None:
    raise RAISED[-1]


def answer(exc: Exception) -> tuple[int, dict[str, object], str | None]:
    RAISED.append(exc)
    app = Litestar([boom], exception_handlers={Exception: errors.handle})
    with TestClient(app) as client:
        response = client.get("/boom")
    return response.status_code, response.json()["error"], response.headers.get("retry-after")


def test_a_database_that_cannot_be_reached_is_a_503() -> None:
    status, error, retry_after = answer(StoreUnavailable("connection refused"))
    assert status == 503
    assert error["code"] == "service_unavailable"
    assert error["type"] == "server_error"
    assert retry_after == "1"
    assert "refused" not in str(error["message"])


def test_a_database_error_that_a_retry_cannot_cure_stays_a_500() -> None:
    status, error, _ = answer(StoreError("cannot use the database: duplicate key"))
    assert status == 500
    assert error["code"] == "server_error"
    assert "duplicate" not in str(error["message"])
