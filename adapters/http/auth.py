"""Admission of `/v1` requests: the bearer key becomes the request's principal (whose owner
the routes hand to every use-case) and is charged to the key's rate. Health, readiness and
the OpenAPI schema stay open.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from litestar.connection import ASGIConnection
from litestar.enums import ScopeType
from litestar.handlers.base import BaseRouteHandler
from litestar.types import Guard

from domain.errors import Unauthenticated
from service.access import Access, Principal

_PRINCIPAL = "principal"


def protected(path: str) -> bool:
    return path == "/v1" or path.startswith("/v1/")


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def admission(access: Callable[[], Access]) -> Guard:
    """A litestar guard on every route: admit `/v1` requests (401 or 429 otherwise) through
    the running process's `Access`."""

    async def admit(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        socket = connection.scope["type"] == ScopeType.WEBSOCKET
        if socket or not protected(connection.scope["path"]):
            # The WebSocket route admits its handshake itself (adapters/http/sockets.py), to
            # refuse it with an HTTP answer: a guard could only close the socket.
            return
        principal = await access().admit(bearer(connection.headers.get("authorization")))
        connection.scope.setdefault("state", {})[_PRINCIPAL] = principal

    return admit


def principal_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
    """Who the request acts for; a request that was never admitted acts for nobody."""
    principal = connection.scope.get("state", {}).get(_PRINCIPAL)
    if not isinstance(principal, Principal):
        raise Unauthenticated("The request was not authenticated.")
    return principal
