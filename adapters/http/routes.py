"""The HTTP endpoints of responses and models: each decodes a request, calls one use-case
with the bundle that the app injects, and encodes its answer."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from functools import partial
from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, Response, delete, get, post, route
from litestar.enums import HttpMethod
from litestar.exceptions import InternalServerException
from litestar.openapi import ResponseSpec
from litestar.params import Parameter
from litestar.response import Stream

from adapters.http import sse
from adapters.http.auth import principal_of
from adapters.http.errors import ClientLeft
from adapters.http.sse import frames
from adapters.http.streaming import EventStream
from domain.errors import InvalidRequest
from domain.objects import ResponseObject
from service import status
from service.access.admission import Access
from service.access.quotas import Slot
from service.audit import chain
from service.bundle import Bundle
from service.ports import Batches
from service.responses import compact as compaction
from service.responses import create as responses
from service.responses import modes, reads, stopping, tokens
from service.settings import Settings
from service.wire.decode import parse_compact_body, parse_create_body, parse_input_tokens_body
from service.wire.errors import ErrorBody
from service.wire.extras import obfuscated, with_client_headers
from service.wire.ids import RESPONSE_ID, check_response_id

JSON = "application/json"
SSE = "text/event-stream"
JSONL = "application/x-ndjson"
ERRORS = {
    400: ResponseSpec(ErrorBody, description="Invalid request"),
    401: ResponseSpec(ErrorBody, description="No API key, or an unknown or revoked one"),
    404: ResponseSpec(ErrorBody, description="No such response (or not yours)"),
    429: ResponseSpec(ErrorBody, description="A per-key rate or stream limit is reached"),
}
MAX_POSITION = 2**31 - 1  # the log's position column is a 32-bit integer
RespId = Annotated[str, Parameter(description="A response id, `resp_…`", pattern=RESPONSE_ID)]


def owner_of(request: Request[Any, Any, Any]) -> str:
    """The tenant a request acts for: the owner of its API key (`anonymous` without auth)."""
    return principal_of(request).owner


def _open_stream(request: Request[Any, Any, Any], access: Access) -> Slot:
    """One of the key's concurrent-stream slots, held until the stream's body ends."""
    return access.open_stream(principal_of(request))


def _after(raw: str | None, param: str = "starting_after") -> int:
    """A resume position: a plain decimal integer, as OpenAI's `starting_after` (a sequence
    number). Taken as text because a framework's int conversion also takes "3.0" or "1e1"."""
    if raw is None:
        return -1
    value = int(raw) if re.fullmatch(r"-?[0-9]{1,12}", raw) else MAX_POSITION + 1
    if not -1 <= value <= MAX_POSITION:
        raise InvalidRequest(
            f"Invalid '{param}': must be an integer between -1 and {MAX_POSITION}.",
            param=param,
            code="invalid_value",
        )
    return value


async def json_body(request: Request[Any, Any, Any]) -> bytes:
    """The body of a request that must be JSON: OpenAI refuses any other declared media type
    with 400 `unsupported_content_type` (in the words below); `application/json` with
    parameters (`; charset=utf-8`) is JSON. A body with no Content-Type at all is read as
    JSON too: clients that post raw bytes without the header (a bare `requests.post(data=)`)
    mean JSON, and nothing else could be meant (docs/security.md)."""
    declared = request.headers.get("content-type")
    if declared is not None and declared.split(";")[0].strip().lower() != JSON:
        shown = declared[:100]
        raise InvalidRequest(
            f"Unsupported content type: '{shown}'. This API method only accepts "
            f"'application/json' requests, but you specified the header 'Content-Type: "
            f"{shown}'. Please try again with a supported content type.",
            code="unsupported_content_type",
        )
    try:
        return await request.body()
    except InternalServerException as exc:  # litestar's only one here: the client went away
        raise ClientLeft from exc


def _json(
    body: bytes | msgspec.Struct, status: int = 200, headers: dict[str, str] | None = None
) -> Response[Any]:
    data = body if isinstance(body, bytes) else msgspec.json.encode(body)
    return Response(data, status_code=status, media_type=JSON, headers=headers)


def _stream(
    body: AsyncIterator[bytes], slot: Slot, media_type: str = SSE, *, created: bool = False
) -> EventStream:
    """`created`: a create's stream, whose first events are committed already (its head
    goes out with them: adapters/http/streaming.py)."""
    return EventStream(
        body,
        slot,
        media_type=media_type,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        head_with_first=created,
    )


def _sse(
    events: Batches,
    slot: Slot,
    settings: Settings,
    *,
    created: bool = False,
    obfuscation: bool = True,
) -> EventStream:
    """An SSE stream of `events`, its delta events padded unless `obfuscation` is off (as
    OpenAI's: adapters/http/sse.py `OBFUSCATED`); `created`: a create's (see `_stream`)."""
    framing = sse.OBFUSCATED if obfuscation else sse.SSE
    body = frames(events, keepalive_s=settings.keepalive_s, framing=framing)
    return _stream(body, slot, created=created)


@post(
    "/v1/responses",
    status_code=200,
    responses=ERRORS,
    summary="Create a response (plain, stream, background, background+stream)",
)
async def create_response(
    request: Request[Any, Any, Any], bundle: Bundle, settings: Settings, access: Access
) -> Response[ResponseObject]:
    req = parse_create_body(await json_body(request), settings.limits)
    req = with_client_headers(req, request.headers)
    owner = owner_of(request)
    if req.stream:
        slot = _open_stream(request, access)  # before anything is written: a 429 writes none
        try:
            events = await modes.create_and_stream(bundle, req, owner)
        except BaseException:
            slot.release()
            raise
        return _sse(  # type: ignore[return-value]
            events, slot, settings, created=True, obfuscation=obfuscated(req)
        )
    if req.background:
        queued = (await responses.create_response(bundle, req, owner)).response
        return _json(queued, headers=_polled(queued.terminal))
    gone = partial(_disconnected, request)
    return _json(await modes.create_and_wait(bundle, req, owner, client_gone=gone))


@route("/v1/responses", http_method=HttpMethod.OPTIONS, include_in_schema=False)
async def create_options() -> Response[None]:
    """The create's methods, in the order a 405 at its path names them (litestar's own
    OPTIONS would sort them)."""
    return Response(None, status_code=204, headers={"allow": "POST, OPTIONS"})


async def _disconnected(request: Request[Any, Any, Any]) -> None:
    """Returns when the client closes the connection (its body is read by then, so the
    next ASGI message is the disconnect, or none until the response is sent)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


@get("/v1/responses/{response_id:str}", responses=ERRORS, summary="Retrieve a response")
async def retrieve_response(
    request: Request[Any, Any, Any],
    bundle: Bundle,
    settings: Settings,
    access: Access,
    response_id: RespId,
    stream: bool = False,
    starting_after: str | None = None,
    include: list[str] | None = None,
    include_obfuscation: bool | None = None,
) -> Response[ResponseObject]:
    check_response_id(response_id)
    owner = owner_of(request)
    if not stream:
        found = await reads.retrieve_polled(bundle, response_id, owner)
        return _json(found.body, headers=_polled(not found.unfinished))
    after = _after(starting_after)
    events = await reads.read_events(bundle, response_id, owner, after=after)
    slot = _open_stream(request, access)
    return _sse(  # type: ignore[return-value]
        events, slot, settings, obfuscation=include_obfuscation is not False
    )


# How soon a client polling a background response should ask again (OpenAI's
# `openai-poll-after-ms` header, which openai-python's pollers read: `lib/_assistants_runs.py`,
# `lib/_vector_stores.py`, `resources/videos.py`, 1000 ms where there is none). Sent on a
# response that has not ended, by the create of a background one and by a retrieve.
POLL_AFTER_MS = "500"


def _polled(ended: bool) -> dict[str, str] | None:
    return None if ended else {"openai-poll-after-ms": POLL_AFTER_MS}


@get(
    "/v1/responses/{response_id:str}/events",
    responses=ERRORS,
    summary="Replay the stored events of a response (SSE or JSON Lines), live-tailing",
    description="SSE by default; JSON Lines with `Accept: application/x-ndjson` or "
    "`?format=jsonl`. `follow=false` returns only what is stored now.",
)
async def response_events(
    request: Request[Any, Any, Any],
    bundle: Bundle,
    settings: Settings,
    access: Access,
    response_id: RespId,
    starting_after: str | None = None,
    format: Literal["sse", "jsonl"] | None = None,
    follow: bool = True,
) -> Stream:
    check_response_id(response_id)
    after = _after(starting_after)
    owner = owner_of(request)
    events = await reads.read_events(bundle, response_id, owner, after=after, follow=follow)
    jsonl = format == "jsonl" or (format is None and JSONL in request.headers.get("accept", ""))
    slot = _open_stream(request, access)
    if jsonl:
        return _stream(frames(events, keepalive_s=None, framing=sse.JSONL, done=None), slot, JSONL)
    return _stream(frames(events, keepalive_s=settings.keepalive_s, framing=sse.SSE), slot)


@post(
    "/v1/responses/input_tokens",
    status_code=200,
    responses=ERRORS,
    summary="Count the input tokens a create with this body would take (writes nothing)",
)
async def count_input_tokens(
    request: Request[Any, Any, Any], bundle: Bundle, settings: Settings
) -> tokens.InputTokens:
    models = bundle.engine.models()
    req = parse_input_tokens_body(
        await json_body(request), settings.limits, models[0] if models else ""
    )
    count = await tokens.count_input_tokens(bundle, req, owner_of(request))
    return tokens.InputTokens(input_tokens=count)


@post(
    "/v1/responses/compact",
    status_code=200,
    responses=ERRORS,
    summary="Compact a conversation: its user messages and one compaction item",
)
async def compact_conversation(
    request: Request[Any, Any, Any], bundle: Bundle, settings: Settings
) -> compaction.Compacted:
    req = parse_compact_body(await json_body(request), settings.limits)
    responses.check_served(bundle, req.response.model)
    return await compaction.compact(bundle, req, owner_of(request))


@post(
    "/v1/responses/{response_id:str}/cancel",
    status_code=200,
    responses=ERRORS,
    summary="Cancel a background response (idempotent)",
)
async def cancel_response(
    request: Request[Any, Any, Any], bundle: Bundle, response_id: RespId
) -> Response[ResponseObject]:
    check_response_id(response_id)
    return _json(await stopping.cancel_response(bundle, response_id, owner_of(request)))


@delete(
    "/v1/responses/{response_id:str}",
    status_code=200,
    responses=ERRORS,
    summary="Delete a response (hidden from the API; its log is kept for audit)",
)
async def delete_response(
    request: Request[Any, Any, Any], bundle: Bundle, response_id: RespId
) -> stopping.Deleted:
    check_response_id(response_id)
    return await stopping.delete_response(bundle, response_id, owner_of(request))


@get(
    "/v1/responses/{response_id:str}/input_items",
    responses=ERRORS,
    summary="List the input items of a response",
)
async def input_items(
    request: Request[Any, Any, Any],
    bundle: Bundle,
    response_id: RespId,
    after: str | None = None,
    limit: int = 20,
    order: Literal["asc", "desc"] = "desc",
    include: list[str] | None = None,
) -> reads.ItemPage:
    check_response_id(response_id)
    return await reads.list_input_items(
        bundle, response_id, owner_of(request), after=after, limit=limit, order=order
    )


@get(
    "/v1/responses/{response_id:str}/proof",
    responses=ERRORS,
    summary="The inclusion proof of a response in the latest signed checkpoint",
    description="resplog's own: docs/guides/auditing.md, 'Proofs'.",
)
async def response_proof(
    request: Request[Any, Any, Any], bundle: Bundle, response_id: RespId
) -> chain.Proof:
    check_response_id(response_id)
    return await reads.proof(bundle, response_id, owner_of(request))


@get("/v1/models", summary="Models the engine serves")
async def list_models(bundle: Bundle) -> status.ModelList:
    return status.list_models(bundle)


@get("/v1/models/{model:path}", summary="One model a create may name", responses=ERRORS)
async def retrieve_model(bundle: Bundle, model: str) -> status.Model:
    return status.retrieve_model(bundle, model.removeprefix("/"))


@get("/health", summary="Liveness", include_in_schema=True)
async def health() -> status.Health:
    return status.Health(status="ok")
