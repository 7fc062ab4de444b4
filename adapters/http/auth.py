"""Admission of `/v1` requests: the bearer key becomes the request's principal (whose owner
the routes hand to every use-case) and is charged to the key's rate. Health, readiness and
the OpenAPI schema stay open.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from litestar import Request
from litestar.connection import ASGIConnection

from domain.errors import Unauthenticated
from service.access.admission import Access, Principal

PRINCIPAL = "principal"


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


def admission(access: Callable[[], Access]) -> Callable[[Request[Any, Any, Any]], Awaitable[None]]:
    """Litestar's `before_request` of every HTTP route: admit `/v1` requests (401 or 429
    otherwise) through the running process's `Access`, before the handler's arguments are
    read. (Not a guard: litestar hands each guard a copy of the route handler, made anew
    for every request. A WebSocket handshake is admitted by its route: sockets.py.)"""

    async def admit(request: Request[Any, Any, Any]) -> None:
        if not protected(request.scope["path"]):
            return
        principal = await access().admit(bearer(request.headers.get("authorization")))
        request.scope.setdefault("state", {})[PRINCIPAL] = principal

    return admit


def principal_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
    """Who the request acts for; a request that was never admitted acts for nobody."""
    principal = connection.scope.get("state", {}).get(PRINCIPAL)
    if not isinstance(principal, Principal):
        raise Unauthenticated("The request was not authenticated.")
    return principal
