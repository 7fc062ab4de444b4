"""Server errors: the body says nothing internal (trace, SQL, paths) and carries the request
id, which the server's log has with the whole story."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.e2e.conftest import Server, stop_server
from tests.e2e.security.conftest import launch

LEAKS = ("Traceback", "sqlite", "SELECT", "events", ".py", "/tmp", "resplog.db", "Error(")


@pytest.fixture
def plain(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    srv = launch(request, tmp_path_factory, "sqlite")
    yield srv
    stop_server(srv)


def test_a_forced_internal_error_is_a_bare_500_with_the_request_id_that_the_log_has(
    plain: Server,
) -> None:
    with httpx.Client(base_url=plain.base_url, timeout=30) as client:
        rid = client.post("/v1/responses", json={"model": "scripted", "input": "x"}).json()["id"]
        with sqlite3.connect(plain.database_url.split("///", 1)[1]) as db:
            db.execute("ALTER TABLE events RENAME TO events_gone")
        broken = client.get(f"/v1/responses/{rid}/input_items")
    assert broken.status_code == 500
    request_id = broken.headers["x-request-id"]
    error = broken.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == ("server_error", "server_error")
    assert request_id in error["message"]
    assert not [leak for leak in LEAKS if leak in broken.text]
    deadline = time.monotonic() + 10
    while request_id not in plain.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    logged = plain.log_text()
    assert f"request {request_id} failed" in logged
    assert "Traceback" in logged and "no such table: events" in logged
