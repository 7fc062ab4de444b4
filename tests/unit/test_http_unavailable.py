"""Errors as HTTP: a database that cannot be reached is a clear 503, never a 500."""

from __future__ import annotations

import pytest
import sqlalchemy.exc as sa_exc
from litestar import Litestar, get
from litestar.testing import TestClient

from adapters.http import errors
from adapters.store.transient import Unreachable

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


@pytest.mark.parametrize(
    "exc",
    [
        sa_exc.OperationalError("SELECT 1", {}, ConnectionRefusedError("refused")),
        sa_exc.InterfaceError("SELECT 1", {}, ConnectionResetError("reset")),
        sa_exc.TimeoutError("QueuePool limit reached"),
        ConnectionRefusedError("connect call failed"),
        Unreachable("the database cannot be reached; retry shortly"),
        errors.Unavailable(),
    ],
)
def test_a_database_that_cannot_be_reached_is_a_503(exc: Exception) -> None:
    status, error, retry_after = answer(exc)
    assert status == 503
    assert error["code"] == "service_unavailable"
    assert error["type"] == "server_error"
    assert retry_after == "1"
    assert "refused" not in str(error["message"])


def test_a_database_error_that_a_retry_cannot_cure_stays_a_500() -> None:
    status, error, _ = answer(sa_exc.IntegrityError("INSERT", {}, ValueError("duplicate key")))
    assert status == 500
    assert error["code"] == "server_error"
    assert "duplicate" not in str(error["message"])
