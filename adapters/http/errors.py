"""The one place errors become HTTP: OpenAI's `{"error": {...}}` shape and status codes.

No internal detail (trace, SQL, path) reaches a client; a server error is logged with the
request id that its body and `x-request-id` header carry. A database that cannot be reached
(the store's `StoreUnavailable`: a lost connection, a server restarting, an exhausted pool)
is 503 `service_unavailable` with `Retry-After`, never a 500. Only the project's error tree
(`domain/errors.py`) is known here, never a database driver's.
"""

from __future__ import annotations

import logging
import math
import os
import re
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import (
    HTTPException,
    MethodNotAllowedException,
    NotFoundException,
    ValidationException,
)
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from adapters.http.watch import CLIENT_CLOSED
from domain.errors import (
    Conflict,
    CorruptEvent,
    EngineError,
    InvalidRequest,
    InvalidTransition,
    NotFound,
    RateLimited,
    StoreUnavailable,
    Unauthenticated,
)
from service.wire.errors import ErrorBody, ErrorDetail

log = logging.getLogger("resplog.http")


class ClientLeft(Exception):
    """The client closed its connection before its request's body was in: no one to answer,
    and no fault of the server's (the request log and metrics say 499: watch.py)."""


def error_response(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response[bytes]:
    body = msgspec.json.encode(ErrorBody(ErrorDetail(message, type_, param, code)))
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def request_id(request: Request[Any, Any, Any]) -> str:
    rid = request.scope.get("state", {}).get("request_id")
    return rid if isinstance(rid, str) else "-"


_KEY = re.compile(r"`\$\.?([^`]*)`")


def _validation(exc: ValidationException) -> Response[bytes]:
    extra = exc.extra if isinstance(exc.extra, list) else []
    first = extra[0] if extra and isinstance(extra[0], dict) else {}
    param = first.get("key")
    message = str(first.get("message") or exc.detail)
    return error_response(
        400,
        f"Invalid '{param}': {message}" if param else message,
        param=param if isinstance(param, str) else None,
        code="invalid_value",
    )


class Refusal(msgspec.Struct, frozen=True):
    """An error as a client is told it: status, OpenAI's error object and extra headers
    (the same for an HTTP answer and a WebSocket `error` event)."""

    status: int
    error: ErrorDetail
    headers: dict[str, str] | None = None


def _refusal(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Refusal:
    return Refusal(status, ErrorDetail(message, type_, param, code), headers)


def refusal(exc: Exception, rid: str) -> Refusal:
    """What the client is told about one of resplog's own errors (or any other exception,
    as a 500 naming the request id `rid`); the cause is logged with `rid`."""
    match exc:
        case InvalidRequest():
            return _refusal(400, exc.message, param=exc.param, code=exc.code)
        case NotFound():
            return _refusal(404, str(exc) or "Not found.", param=exc.param, code=exc.code)
        case InvalidTransition():
            return _refusal(400, str(exc), code="invalid_state")
        case Conflict():
            return _refusal(409, "The response was changed concurrently; retry.", code="conflict")
        case StoreUnavailable():
            log.warning("request %s: database unavailable (%s)", rid, exc)
            return _refusal(
                503,
                "The service is temporarily unavailable; retry shortly.",
                type_="server_error",
                code="service_unavailable",
                headers={"Retry-After": "1"},
            )
        case Unauthenticated():
            return _refusal(
                401, exc.message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}
            )
        case RateLimited():
            return _refusal(
                429,
                exc.message,
                type_="requests",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(max(1, math.ceil(exc.retry_after)))},
            )
        case EngineError():
            # The engine's own message names its URL and upstream details: the log has it.
            log.error("request %s: engine error (%s): %s", rid, exc.code, exc)
            return _refusal(
                502,
                f"The generation engine failed ({exc.code}; request id {rid}).",
                type_="server_error",
                code=exc.code,
            )
        case CorruptEvent():
            log.error("request %s: %s", rid, exc)
        case _:
            log.error("request %s failed", rid, exc_info=exc)
    return _refusal(
        HTTP_500_INTERNAL_SERVER_ERROR,
        f"The server had an error while processing your request (request id {rid}).",
        type_="server_error",
        code="server_error",
    )


def _answer(refused: Refusal) -> Response[bytes]:
    body = msgspec.json.encode(ErrorBody(refused.error))
    return Response(
        body, status_code=refused.status, media_type="application/json", headers=refused.headers
    )


def new_request_id() -> str:
    # 128 random bits in hex, as a uuid4's hex (less its six fixed bits), at a fifth of its
    # cost: every request gets one.
    return "req_" + os.urandom(16).hex()


def handle(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    """Map any exception to an OpenAI-shaped error response with an `x-request-id`.

    `serve` gives every request its id at the edge (adapters/http/edge.py), before the
    app; an app run without the edge (a test's) gives an error's response one here."""
    state = request.scope.setdefault("state", {})
    minted = None
    if not isinstance(state.get("request_id"), str):
        minted = state["request_id"] = new_request_id()
    response = _mapped(request, exc)
    if minted is not None:
        response.headers["x-request-id"] = minted
    return response


def _mapped(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    match exc:
        case ClientLeft():  # sent to no one
            return error_response(
                CLIENT_CLOSED, "The client closed the request.", code="client_closed_request"
            )
        case ValidationException():
            return _validation(exc)
        case NotFoundException():
            return error_response(
                404, f"Unknown URL: {request.method} {request.url.path[:200]}.", code="unknown_url"
            )
        case MethodNotAllowedException():
            allow = _http_methods((exc.headers or {}).get("allow", ""))
            return error_response(
                405,
                f"Method {request.method} is not allowed on {request.url.path[:200]}; "
                f"allowed: {allow or 'none'}.",
                code="method_not_allowed",
                headers={**(exc.headers or {}), "allow": allow},
            )
        case HTTPException() if exc.status_code < 500:
            if exc.status_code == 413:
                return error_response(
                    413, "The request body is too large.", code="request_too_large"
                )
            return error_response(exc.status_code, str(exc.detail), headers=exc.headers)
    return _answer(refusal(exc, request_id(request)))


def _http_methods(allow: str) -> str:
    """Litestar's `allow` as the path's HTTP methods, OPTIONS last as litestar adds its own:
    without the WebSocket that litestar lists beside them at a path that has one
    (`GET /v1/responses` upgraded, adapters/http/sockets.py), and with the create's own
    OPTIONS (routes.py `create_options`, registered before the route) in the same place."""
    named = [m for m in allow.split(", ") if m]
    methods = [m for m in named if m not in ("websocket", "OPTIONS")]
    return ", ".join([*methods, "OPTIONS"] if "OPTIONS" in named else methods)
