"""The one exception-to-HTTP mapping: status, OpenAI's shape, and nothing internal."""

from __future__ import annotations

import logging

import msgspec
import pytest
from litestar import Request

from adapters.http import errors
from domain.errors import EngineError, NotFound, RateLimited, Unauthenticated


def request() -> Request:  # type: ignore[type-arg]
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v1/responses",
        "headers": [],
        "query_string": b"",
        "state": {"request_id": "req_test"},
    }
    return Request(scope)  # type: ignore[arg-type]


def body(response: object) -> dict[str, object]:
    decoded = msgspec.json.decode(response.content)  # type: ignore[attr-defined]
    assert set(decoded["error"]) == {"message", "type", "param", "code"}
    return decoded["error"]  # type: ignore[no-any-return]


def test_an_engine_error_names_its_code_and_the_request_but_not_the_engine(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exc = EngineError(
        "cannot connect to sglang at http://10.0.0.5:30000", code="engine_unavailable"
    )
    with caplog.at_level(logging.ERROR, logger="resplog.http"):
        response = errors.handle(request(), exc)
    error = body(response)
    assert response.status_code == 502
    assert error["code"] == "engine_unavailable" and "req_test" in str(error["message"])
    assert "10.0.0.5" not in str(error["message"])
    assert "req_test" in caplog.text and "10.0.0.5" in caplog.text


def test_unauthenticated_is_401_invalid_api_key_with_a_bearer_challenge() -> None:
    response = errors.handle(request(), Unauthenticated("no key"))
    assert response.status_code == 401 and response.headers["WWW-Authenticate"] == "Bearer"
    assert body(response)["code"] == "invalid_api_key"


@pytest.mark.parametrize(("wait", "header"), [(0.01, "1"), (1.0, "1"), (4.2, "5")])
def test_rate_limited_is_429_with_whole_seconds_to_wait(wait: float, header: str) -> None:
    response = errors.handle(request(), RateLimited("slow down", retry_after=wait))
    assert response.status_code == 429 and response.headers["Retry-After"] == header
    assert body(response)["code"] == "rate_limit_exceeded"


def test_not_found_carries_its_param_and_code() -> None:
    exc = NotFound("gone", param="previous_response_id", code="previous_response_not_found")
    error = body(errors.handle(request(), exc))
    assert (error["param"], error["code"]) == (
        "previous_response_id",
        "previous_response_not_found",
    )


def test_an_error_before_any_middleware_ran_gets_a_request_id_header() -> None:
    """The router refuses unknown routes and wrong methods before middleware runs: the
    handler gives such a request its id; one that has an id gets no second header."""
    bare = Request({**request().scope, "state": {}})  # type: ignore[arg-type]
    response = errors.handle(bare, NotFound("no"))
    assert response.headers["x-request-id"].startswith("req_")
    assert bare.scope["state"]["request_id"] == response.headers["x-request-id"]  # type: ignore[typeddict-item]
    assert "x-request-id" not in errors.handle(request(), NotFound("no")).headers
