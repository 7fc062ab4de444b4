"""The app factory (a composition root): builds the store, engine and runner, and the
litestar app over them; its lifespan owns their start and orderly stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any, Protocol

import msgspec
from litestar import Litestar, Request, Response, get
from litestar.datastructures import State
from litestar.enums import ScopeType
from litestar.openapi import OpenAPIConfig
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from adapters.http import auth, errors, routes
from service.access import Access
from service.ports import (
    ApiKeyStore,
    Doorbells,
    Engine,
    EventStore,
    EventWriter,
    Leases,
    ResponseIndex,
)
from service.responses import Services
from service.settings import Settings
from service.wire import CreateResponseBody

log = logging.getLogger("resplog")
VERSION = "0.1.0"


class Backend(Protocol):
    """A store with its writer: what the app needs from the database side."""

    store: EventStore
    writer: EventWriter
    index: ResponseIndex
    keys: ApiKeyStore
    leases: Leases
    bells: Doorbells

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def ready(self) -> str | None:
        """None when reachable and migrated, else why not."""
        ...


def request_ids(app: ASGIApp) -> ASGIApp:
    """Give every request an id, in `scope["state"]` and the `x-request-id` header."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await app(scope, receive, send)
            return
        rid = f"req_{uuid.uuid4().hex}"
        scope.setdefault("state", {})["request_id"] = rid

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", rid.encode()))
                message["headers"] = headers
            await send(message)

        await app(scope, receive, send_with_id)

    return middleware


@get("/ready", summary="Readiness: database reachable and migrated, engine answering")
async def ready(state: State) -> Response[routes.Health]:
    backend: Backend = state.backend
    svc: Services = state.services
    db = await backend.ready()
    engine_ok = await svc.engine.ready()
    ok = db is None and engine_ok
    body = routes.Health(
        status="ready" if ok else "unavailable",
        database=db or "ok",
        engine="ok" if engine_ok else "not answering",
    )
    return Response(body, status_code=200 if ok else 503)


@get("/openapi.json", include_in_schema=False)
async def openapi_json(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Litestar's schema, with the create body (decoded by hand, strictly) filled in."""
    doc = request.app.openapi_schema.to_schema()
    (_, components) = msgspec.json.schema_components(
        [CreateResponseBody], ref_template="#/components/schemas/{name}"
    )
    doc.setdefault("components", {}).setdefault("schemas", {}).update(components)
    op = doc["paths"]["/v1/responses"]["post"]
    op["requestBody"] = {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/CreateResponseBody"}}
        },
    }
    op["responses"]["200"]["content"]["text/event-stream"] = {
        "schema": {"type": "string", "description": "SSE when stream=true"}
    }
    if request.app.state.settings.access.auth == "keys":
        _require_bearer(doc)
    return Response(msgspec.json.encode(doc), media_type="application/json")


def _require_bearer(doc: dict[str, Any]) -> None:
    doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, ops in doc["paths"].items():
        if auth.protected(path):
            for op in ops.values():
                op["security"] = [{"bearer": []}]


def begin_shutdown(app: Litestar) -> None:
    """Start the graceful shutdown of a running app's generations now (from a signal
    handler): stop claiming work, give running generations the grace period. The server
    meanwhile waits for its open connections, which these generations are feeding."""
    begin = getattr(app.state, "begin_shutdown", None)
    if begin is not None:
        begin()


def create_app(
    settings: Settings, *, backend: Backend | None = None, engine: Engine | None = None
) -> Litestar:
    """The resplog app. `backend`/`engine` default to what `settings` names."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        from adapters.wiring import build_engine, build_services, open_backend

        be = backend or await open_backend(settings)
        await be.start()
        eng = engine or await build_engine(settings)
        svc, background = build_services(settings, be, eng)
        app.state.backend = be
        app.state.settings = settings
        app.state.access = Access(settings.access, be.keys)
        app.state.services = svc
        app.state.background = background
        loop = asyncio.get_running_loop()
        app.state.begin_shutdown = lambda: loop.call_soon_threadsafe(
            background.begin_drain, settings.shutdown_grace_s
        )
        await background.start()
        log.info(
            "resplog ready: engine=%s models=%s background slots=%d",
            eng.name,
            eng.models(),
            settings.workers,
        )
        try:
            yield
        finally:
            await background.drain(settings.shutdown_grace_s)
            close = getattr(eng, "aclose", None)
            if close is not None:
                await close()
            await be.close()

    return Litestar(
        route_handlers=[
            routes.create_response,
            routes.retrieve_response,
            routes.response_events,
            routes.cancel_response,
            routes.delete_response,
            routes.input_items,
            routes.list_models,
            routes.health,
            ready,
            openapi_json,
        ],
        lifespan=[lifespan],
        guards=[auth.admit],
        exception_handlers={Exception: errors.handle},
        middleware=[request_ids],
        request_max_body_size=settings.max_body_bytes,
        openapi_config=OpenAPIConfig(title="resplog", version=VERSION, path="/schema"),
        logging_config=None,
    )
