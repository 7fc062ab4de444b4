"""The HTTP endpoints: thin translations between litestar and the use-cases."""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.datastructures import State
from litestar.openapi import ResponseSpec
from litestar.params import Parameter
from litestar.response import Stream

from adapters.http.auth import principal_of
from adapters.http.sse import frames, jsonl_line, sse_frame
from domain.errors import InvalidRequest
from domain.fold import project
from domain.objects import ResponseObject
from domain.reasons import CancelReason
from service import responses as uc
from service.access import Access
from service.quotas import Slot
from service.settings import Settings
from service.wire import RESPONSE_ID, ErrorBody, check_response_id, parse_create_body

JSON = "application/json"
SSE = "text/event-stream"
JSONL = "application/x-ndjson"
_ERRORS = {
    400: ResponseSpec(ErrorBody, description="Invalid request"),
    401: ResponseSpec(ErrorBody, description="No API key, or an unknown or revoked one"),
    404: ResponseSpec(ErrorBody, description="No such response (or not yours)"),
    429: ResponseSpec(ErrorBody, description="A per-key rate or stream limit is reached"),
}
MAX_POSITION = 2**31 - 1  # the log's position column is a 32-bit integer
RespId = Annotated[str, Parameter(description="A response id, `resp_…`", pattern=RESPONSE_ID)]


def _svc(state: State) -> uc.Services:
    svc = state.services
    assert isinstance(svc, uc.Services)
    return svc


def _settings(state: State) -> Settings:
    settings = state.settings
    assert isinstance(settings, Settings)
    return settings


def owner_of(request: Request[Any, Any, Any]) -> str:
    """The tenant a request acts for: the owner of its API key (`anonymous` without auth)."""
    return principal_of(request).owner


def _open_stream(request: Request[Any, Any, Any], state: State) -> Slot:
    """One of the key's concurrent-stream slots, held until the stream's body ends."""
    access: Access = state.access
    return access.open_stream(principal_of(request))


def _after(value: int | None, param: str = "starting_after") -> int:
    if value is None:
        return -1
    if not -1 <= value <= MAX_POSITION:
        raise InvalidRequest(
            f"Invalid '{param}': must be between -1 and {MAX_POSITION}.",
            param=param,
            code="invalid_value",
        )
    return value


def _json(body: bytes | msgspec.Struct, status: int = 200) -> Response[Any]:
    data = body if isinstance(body, bytes) else msgspec.json.encode(body)
    return Response(data, status_code=status, media_type=JSON)


def _stream(body: AsyncIterator[bytes], slot: Slot, media_type: str = SSE) -> Stream:
    held = _holding(body, slot)
    # A body that is never iterated (the client left first) never runs its `finally`.
    weakref.finalize(held, slot.release)
    return Stream(
        held,
        media_type=media_type,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _holding(body: AsyncIterator[bytes], slot: Slot) -> AsyncIterator[bytes]:
    try:
        async for chunk in body:
            yield chunk
    finally:
        slot.release()


@post(
    "/v1/responses",
    status_code=200,
    responses=_ERRORS,
    summary="Create a response (plain, stream, background, background+stream)",
)
async def create_response(
    request: Request[Any, Any, Any], state: State
) -> Response[ResponseObject]:
    svc, settings = _svc(state), _settings(state)
    req = parse_create_body(await request.body(), settings.limits)
    owner = owner_of(request)
    slot = _open_stream(request, state) if req.stream else Slot(None)
    try:
        started = await uc.create_response(svc, req, owner)
    except BaseException:
        slot.release()
        raise
    if req.stream:
        rid = started.state.response.id if started.state.response else ""

        def closed(finished: bool) -> None:
            if not finished and not req.background:
                svc.runner.request_cancel(rid, CancelReason.CLIENT_DISCONNECTED)

        tail = svc.store.subscribe(rid, -1)
        body = frames(tail, keepalive_s=settings.keepalive_s, on_close=closed)
        return _stream(body, slot)  # type: ignore[return-value]
    if req.background:
        return _json(started.response)
    assert started.generation is not None  # a plain response runs where it was created
    final = await started.generation.wait()
    return _json(project(final))


@get("/v1/responses/{response_id:str}", responses=_ERRORS, summary="Retrieve a response")
async def retrieve_response(
    request: Request[Any, Any, Any],
    state: State,
    response_id: RespId,
    stream: bool = False,
    starting_after: int | None = None,
    include: list[str] | None = None,
    include_obfuscation: bool | None = None,
) -> Response[ResponseObject]:
    svc = _svc(state)
    check_response_id(response_id)
    owner = owner_of(request)
    if not stream:
        return _json(await uc.retrieve_raw(svc, response_id, owner))
    after = _after(starting_after)
    await uc.check_readable(svc, response_id, owner)
    slot = _open_stream(request, state)
    tail = svc.store.subscribe(response_id, after)
    return _stream(frames(tail, keepalive_s=_settings(state).keepalive_s), slot)  # type: ignore[return-value]


@get(
    "/v1/responses/{response_id:str}/events",
    responses=_ERRORS,
    summary="Replay the stored events of a response (SSE or JSON Lines), live-tailing",
    description="SSE by default; JSON Lines with `Accept: application/x-ndjson` or "
    "`?format=jsonl`. `follow=false` returns only what is stored now.",
)
async def response_events(
    request: Request[Any, Any, Any],
    state: State,
    response_id: RespId,
    starting_after: int | None = None,
    format: Literal["sse", "jsonl"] | None = None,
    follow: bool = True,
) -> Stream:
    svc = _svc(state)
    check_response_id(response_id)
    after = _after(starting_after)
    await uc.check_readable(svc, response_id, owner_of(request))
    jsonl = format == "jsonl" or (format is None and JSONL in request.headers.get("accept", ""))
    slot = _open_stream(request, state)
    tail = svc.store.subscribe(response_id, after) if follow else _stored(svc, response_id, after)
    keepalive = _settings(state).keepalive_s
    if jsonl:
        return _stream(frames(tail, keepalive_s=None, frame=jsonl_line, done=None), slot, JSONL)
    return _stream(frames(tail, keepalive_s=keepalive, frame=sse_frame), slot)


async def _stored(svc: uc.Services, response_id: str, after: int) -> Any:
    for event in await svc.store.read(response_id, after):
        yield event


@post(
    "/v1/responses/{response_id:str}/cancel",
    status_code=200,
    responses=_ERRORS,
    summary="Cancel a background response (idempotent)",
)
async def cancel_response(
    request: Request[Any, Any, Any], state: State, response_id: RespId
) -> Response[ResponseObject]:
    check_response_id(response_id)
    return _json(await uc.cancel_response(_svc(state), response_id, owner_of(request)))


@delete(
    "/v1/responses/{response_id:str}",
    status_code=200,
    responses=_ERRORS,
    summary="Delete a response (hidden from the API; its log is kept for audit)",
)
async def delete_response(
    request: Request[Any, Any, Any], state: State, response_id: RespId
) -> uc.Deleted:
    check_response_id(response_id)
    return await uc.delete_response(_svc(state), response_id, owner_of(request))


@get(
    "/v1/responses/{response_id:str}/input_items",
    responses=_ERRORS,
    summary="List the input items of a response",
)
async def input_items(
    request: Request[Any, Any, Any],
    state: State,
    response_id: RespId,
    after: str | None = None,
    limit: int = 20,
    order: Literal["asc", "desc"] = "desc",
    include: list[str] | None = None,
) -> uc.ItemPage:
    check_response_id(response_id)
    return await uc.list_input_items(
        _svc(state), response_id, owner_of(request), after=after, limit=limit, order=order
    )


class Model(msgspec.Struct, frozen=True):
    id: str
    owned_by: str
    object: Literal["model"] = "model"
    created: int = 0


class ModelList(msgspec.Struct, frozen=True):
    data: list[Model]
    object: Literal["list"] = "list"


@get("/v1/models", summary="Models the engine serves")
async def list_models(state: State) -> ModelList:
    engine = _svc(state).engine
    return ModelList(data=[Model(id=m, owned_by=f"resplog-{engine.name}") for m in engine.models()])


class Health(msgspec.Struct, frozen=True):
    status: str
    database: str | None = None
    engine: str | None = None


@get("/health", summary="Liveness", include_in_schema=True)
async def health() -> Health:
    return Health(status="ok")
