"""The app factory (a composition root): the litestar app over a running process's
bundle, which it injects into the routes; the process is the caller's (`serve` opens it
before it listens) or, by default, the app lifespan's own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Litestar, Request, Response, get
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig

from adapters.http import auth, errors, routes, sockets
from adapters.http import conversations as conversation_routes
from adapters.wiring import Process, running_process
from domain.errors import StoreUnavailable
from service import status
from service.access.admission import Access
from service.bundle import Bundle
from service.settings import Settings
from service.wire.schema import create_body_components

log = logging.getLogger("resplog")
VERSION = "0.1.0"
CREATE = "/v1/responses"


@get("/ready", summary="Readiness: database reachable and migrated, engine answering")
async def ready(bundle: Bundle) -> Response[status.Health]:
    health = await status.readiness(bundle)
    return Response(health, status_code=200 if health.status == "ready" else 503)


@get("/openapi.json", include_in_schema=False)
async def openapi_json(request: Request[Any, Any, Any], settings: Settings) -> Response[bytes]:
    """The app's OpenAPI document (`openapi_document`)."""
    doc = openapi_document(request.app, settings)
    return Response(msgspec.json.encode(doc), media_type="application/json")


def openapi_document(app: Litestar, settings: Settings) -> dict[str, Any]:
    """Litestar's schema of the app, completed in place the first time: the create's
    operation (its body decoded by hand, strictly, which litestar cannot describe) and the
    bearer scheme under `--auth keys`. In place, because litestar's own pages (`/schema`,
    `/schema/openapi.json`, …) serve that same document, which litestar makes once and
    keeps; the lifespan completes it before the first request."""
    plugin: Any = app.plugins.get("OpenAPIPlugin")
    doc: dict[str, Any] = plugin.provide_openapi_schema()
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    if "CreateResponseBody" in schemas:
        return doc
    schemas.update(create_body_components("#/components/schemas/{name}"))
    doc["paths"][CREATE]["post"] = _create_operation()
    if settings.access.auth == "keys":
        _require_bearer(doc)
    return doc


def _create_operation() -> dict[str, Any]:
    """The create's operation (routes.py `create_response`): its body decoded by hand,
    strictly, and its answer JSON or SSE."""

    def ref(name: str) -> dict[str, str]:
        return {"$ref": f"#/components/schemas/{name}"}

    errors_ = {
        str(status): {
            "description": spec.description,
            "content": {"application/json": {"schema": ref("ErrorBody")}},
        }
        for status, spec in routes.ERRORS.items()
    }
    return {
        "summary": "Create a response (plain, stream, background, background+stream)",
        "operationId": "V1ResponsesCreateResponse",
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ref("CreateResponseBody")}},
        },
        "responses": {
            "200": {
                "description": "The response (JSON), or its events (SSE) when stream=true",
                "content": {
                    "application/json": {"schema": ref("ResponseObject")},
                    "text/event-stream": {
                        "schema": {"type": "string", "description": "SSE when stream=true"}
                    },
                },
            },
            **errors_,
        },
        "deprecated": False,
    }


def _require_bearer(doc: dict[str, Any]) -> None:
    doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, ops in doc["paths"].items():
        if auth.protected(path):
            for op in ops.values():
                op["security"] = [{"bearer": []}]


class _Live:
    """What the app serves over, once its process runs: the bundle, and the admission of
    requests (its rate and stream counters live as long as the process)."""

    def __init__(self) -> None:
        self.process: Process | None = None
        self.access: Access | None = None

    def start(self, settings: Settings, process: Process) -> None:
        self.process = process
        self.access = Access(settings.access, process.bundle.keys)

    def bundle(self) -> Bundle:
        if self.process is None:  # a request before the lifespan started the process
            raise StoreUnavailable("the server is still starting")
        return self.process.bundle

    def admission(self) -> Access:
        if self.access is None:
            raise StoreUnavailable("the server is still starting")
        return self.access

    # The same as dependencies, chained: litestar resolves the dependencies a handler takes
    # that depend on nothing in one anyio task group, a task each (three tasks and a group,
    # every request). Each of these takes the one before it (its argument, otherwise
    # unused), so that every level holds one dependency, which litestar awaits in place.
    def bundle_after(self, settings: Any) -> Bundle:
        return self.bundle()

    def admission_after(self, bundle: Any) -> Access:
        return self.admission()

    def stopping_after(self, access: Any) -> asyncio.Event:
        """Set once the process begins to stop (`Process.stopping`)."""
        if self.process is None:
            raise StoreUnavailable("the server is still starting")
        return self.process.stopping


def create_app(settings: Settings, *, process: Process | None = None) -> Litestar:
    """The resplog app over `process` (the caller keeps it running), or else over one that
    the app lifespan opens from `settings` and drains and closes at shut-down. `serve` runs
    it behind the edge (adapters/http/edge.py), which gives every request its id."""
    live = _Live()

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        openapi_document(app, settings)  # before litestar's pages serve it
        if process is not None:
            live.start(settings, process)
            yield
            return
        async with running_process(settings) as own:
            live.start(settings, own)
            announce_ready(settings, own)
            yield

    return Litestar(
        route_handlers=[
            routes.create_options,  # first: litestar adds an OPTIONS to a path that lacks one
            routes.create_response,
            *conversation_routes.ROUTES,
            routes.count_input_tokens,
            routes.compact_conversation,
            sockets.responses_socket,
            routes.retrieve_response,
            routes.response_events,
            routes.cancel_response,
            routes.delete_response,
            routes.input_items,
            routes.response_proof,
            routes.list_models,
            routes.retrieve_model,
            routes.health,
            ready,
            openapi_json,
        ],
        dependencies={
            "settings": Provide(lambda: settings, sync_to_thread=False),
            "bundle": Provide(live.bundle_after, sync_to_thread=False),
            "access": Provide(live.admission_after, sync_to_thread=False),
            "stopping": Provide(live.stopping_after, sync_to_thread=False),
        },
        lifespan=[lifespan],
        before_request=auth.admission(live.admission),
        exception_handlers={Exception: errors.handle},
        request_max_body_size=settings.max_body_bytes,
        openapi_config=OpenAPIConfig(title="resplog", version=VERSION, path="/schema"),
        logging_config=None,
    )


def announce_ready(settings: Settings, process: Process) -> None:
    engine = process.bundle.engine
    log.info(
        "resplog ready: engine=%s models=%s background slots=%d",
        engine.name,
        engine.models(),
        settings.workers,
    )
