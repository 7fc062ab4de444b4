"""Property-based fuzzing of the HTTP API against a real server, on PostgreSQL and on SQLite:
every operation from the app's own `/openapi.json` (schemathesis, inputs that fit the schema
and inputs that do not), and create bodies shaped like OpenAI's (hypothesis; the schema
cannot say that `input` or `previous_response_id` is needed, so schema-made bodies rarely
get past that). Properties: no 5xx, every error in OpenAI's shape, nothing written when
rejected.

`RESPLOG_FUZZ_EXAMPLES` sets the examples per operation (default 25; twice that for
bodies); a long run:

    RESPLOG_FUZZ_EXAMPLES=2000 .venv/bin/pytest tests/e2e/security/test_fuzz.py -p no:randomly
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
import warnings
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar.exceptions import LitestarDeprecationWarning
from litestar.testing import TestClient
from schemathesis import GenerationMode

from adapters.http.app import create_app
from service.access.admission import AccessPolicy
from service.settings import Settings
from tests.e2e.conftest import Server, stop_server
from tests.e2e.security.conftest import KEYED, launch, make_key

EXAMPLES = int(os.environ.get("RESPLOG_FUZZ_EXAMPLES", "25"))
COUNTS = """
SELECT (SELECT count(*) FROM responses),
       (SELECT count(*) FROM events),
       (SELECT count(*) FROM responses WHERE cancel_requested_at IS NOT NULL),
       (SELECT count(*) FROM responses WHERE deleted_at IS NOT NULL),
       (SELECT count(*) FROM responses WHERE status IN ('queued', 'in_progress'))
"""


class Log:
    """One open connection to the server's database, for a count per example."""

    def __init__(self, server: Server) -> None:
        self.loop = asyncio.new_event_loop()
        self.conn: asyncpg.Connection | sqlite3.Connection
        if server.kind == "sqlite":
            self.conn = sqlite3.connect(server.database_url.split("///", 1)[1])
        else:
            url = server.database_url.replace("+asyncpg", "")
            self.conn = self.loop.run_until_complete(asyncpg.connect(url))

    def counts(self) -> tuple[int, ...]:
        if isinstance(self.conn, sqlite3.Connection):
            return tuple(self.conn.execute(COUNTS).fetchone())
        return tuple(self.loop.run_until_complete(self.conn.fetchrow(COUNTS)))

    def quiet(self) -> tuple[int, ...]:
        """The counts once no accepted response is still being generated."""
        deadline = time.monotonic() + 30
        while (counts := self.counts())[-1] and time.monotonic() < deadline:
            time.sleep(0.01)
        return counts

    def close(self) -> None:
        if isinstance(self.conn, sqlite3.Connection):
            self.conn.close()
        else:
            self.loop.run_until_complete(self.conn.close())
        self.loop.close()


# On both stores; and the parameter gives each of schemathesis' items (one an API operation)
# an id of its own under pytest 9.2, which builds an unparametrized item's id from the
# test's name alone: without it they would all share one, and a runner that tells items
# apart by id (pytest-xdist) would run the first operation only.
@pytest.fixture(scope="module", params=["postgres", "sqlite"])
def fuzzed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, str, Log]]:
    srv = launch(request, tmp_path_factory, request.param, *KEYED)
    log = Log(srv)
    yield srv, make_key(srv, "fuzzer"), log
    log.close()
    stop_server(srv)


def app_schema() -> Any:
    """The app's own `/openapi.json`, as `serve --auth keys` publishes it (built in-process:
    schemathesis needs it when tests are collected, before any server runs: the schema
    needs no running process, so the app's lifespan is not entered)."""
    settings = Settings(access=AccessPolicy(auth="keys"))
    with warnings.catch_warnings():  # litestar's notes on parameter style, as when serving
        warnings.simplefilter("ignore", LitestarDeprecationWarning)
        app = create_app(settings)
    doc = TestClient(app).get("/openapi.json").json()  # no `with`: no lifespan
    loaded = schemathesis.openapi.from_dict(doc)
    loaded.config.generation.update(
        modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
        max_examples=EXAMPLES,
        database="none",
    )
    return loaded


schema = app_schema()


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_no_input_breaks_the_api_or_writes_when_rejected(
    case: Any, fuzzed: tuple[Server, str, Log]
) -> None:
    server, key, log = fuzzed
    before = log.quiet()
    response = case.call(
        base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60
    )
    assert response.status_code < 500, (case.method, case.path, response.text[:500])
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert isinstance(error["message"], str) and error["message"]
        assert log.counts() == before, (case.method, case.path, response.status_code)


# --- request bodies, shaped like OpenAI's, mostly valid and often a little wrong -----------

# Strings that have broken servers before, next to random ones.
NASTY = st.sampled_from(
    ["", "\x00", "a\x00b", "\n", "\u202e", "' OR 1=1 --", "../../etc/passwd", "%s%n", "x" * 600]
)
ANY_TEXT = st.one_of(st.text(max_size=24), NASTY)
NUMBER = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | NUMBER | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ANY_TEXT, inner, max_size=3),
    max_leaves=8,
)


PLAIN = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FFF), max_size=24)
PART = st.fixed_dictionaries(
    {"type": st.sampled_from(["input_text", "output_text", "text"]), "text": ANY_TEXT}
)
MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system", "developer"]),
        "content": ANY_TEXT | st.lists(PART, max_size=3),
    },
    optional={"type": st.just("message")},
)
TOOL_OUTPUT = st.fixed_dictionaries(
    {"type": st.just("function_call_output"), "call_id": PLAIN, "output": ANY_TEXT}
)
CALL = st.fixed_dictionaries(
    {"type": st.just("function_call"), "call_id": PLAIN, "name": PLAIN, "arguments": ANY_TEXT}
)
TOOL_NAME = st.from_regex(r"[a-z_]{1,8}", fullmatch=True)
TOOL = st.fixed_dictionaries(
    {"type": st.just("function"), "name": TOOL_NAME},
    optional={"parameters": st.dictionaries(ANY_TEXT, JSON_VALUE, max_size=3)},
)
VALID = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["scripted", "gpt-x"]) | ANY_TEXT,
        "input": ANY_TEXT | st.lists(st.one_of(MESSAGE, TOOL_OUTPUT, CALL), max_size=4),
    },
    optional={
        "instructions": ANY_TEXT,
        "tools": st.lists(TOOL, max_size=3, unique_by=lambda t: t["name"]),
        "max_output_tokens": st.integers(min_value=16, max_value=4096),
        "temperature": st.floats(min_value=0, max_value=2),
        "top_p": st.floats(min_value=0, max_value=1),
        "metadata": st.dictionaries(PLAIN.filter(lambda k: len(k) <= 64), ANY_TEXT, max_size=4),
        "store": st.booleans(),
        "stream": st.booleans(),
        "include": st.lists(ANY_TEXT, max_size=2),
        "reasoning": st.fixed_dictionaries({"effort": st.sampled_from(["low", "high"])}),
        "text": st.fixed_dictionaries({"format": st.just({"type": "json_object"})}),
        "user": ANY_TEXT,
        "truncation": st.sampled_from(["auto", "disabled"]),
        "previous_response_id": st.from_regex(r"resp_[a-z0-9]{1,8}", fullmatch=True),
    },
)
FIELDS = ["model", "input", "tools", "metadata", "max_output_tokens", "stream", "background"]


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A body OpenAI would take, then maybe one field given any JSON value at all."""
    body: dict[str, Any] = draw(VALID)
    if draw(st.integers(min_value=0, max_value=3)) == 0:
        body[draw(st.sampled_from([*FIELDS, "unknown", *body]))] = draw(JSON_VALUE)
    return body


@settings(max_examples=2 * EXAMPLES, deadline=None, database=None)
@given(body=bodies())
def test_no_create_body_breaks_the_api_or_writes_when_rejected(
    fuzzed: tuple[Server, str, Log], body: dict[str, Any]
) -> None:
    server, key, log = fuzzed
    before = log.quiet()
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        response = client.post(
            "/v1/responses", json=body, headers={"Authorization": f"Bearer {key}"}
        )
    assert response.status_code < 500, (body, response.text[:500])
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert log.counts() == before, (body, response.status_code)
