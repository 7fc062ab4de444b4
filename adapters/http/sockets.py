"""WebSocket mode: `GET /v1/responses` upgraded to a WebSocket (docs/websocket.md).

The protocol is OpenAI's (openai-python `ResponsesClientEvent`, `ResponsesServerEvent`,
`client.responses.connect()`; Open Responses `x-openresponses-websocket`): the client sends
`response.create` messages, each a create body beside `"type"`; the server answers with the
response's stream events, the same JSON as its SSE stream (the stored bytes, read from the
log), and refuses a message with an `error` event `{"type": "error", "status", "error":
{...}}` in OpenAI's error shape, after which the connection stays open. A message naming a
`stream_id` runs on that lane (FIFO per lane, lanes concurrent) and every event it causes
echoes the `stream_id`.

The handshake is admitted here (the app's admission, `auth.admission`, is a
`before_request`, which litestar runs for HTTP routes only) so that a refusal is an HTTP
answer (401, 429, 503 with OpenAI's error body, through the ASGI denial-response extension)
instead of a bare close. The connection holds one of its key's stream slots while open, and
one more for each further response streaming at the same time; each `response.create` is
charged to the key's rate like a POST, when it arrives. What a connection holds of the
messages it was sent, queued or streaming, is bounded in bytes per connection and per key
(`ws_max_queued_bytes`, `ws_max_queued_bytes_per_key`), and let go when the connection ends.

When the process begins to stop (`Process.stopping`), a connection drains: the responses
it is streaming or has queued go on to their end (for `shutdown_grace_s` at most, after
which the process ends what still runs), a `response.create` that arrives meanwhile is an
`error` event (503, `server_shutting_down`, with a `retry-after` header), and the socket is
closed with 1001 (going away), which openai-python and openai-node reconnect after
(`src/openai/types/websocket_reconnection.py`, `src/internal/ws.ts` `isRecoverableClose`).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import msgspec
from litestar import WebSocket, websocket

from adapters.http.auth import bearer
from adapters.http.errors import Refusal, refusal
from domain.errors import InvalidRequest, RateLimited
from service.access.admission import Access, Principal
from service.access.quotas import Slot
from service.bundle import Bundle
from service.responses.sockets import Lane, SocketSession
from service.settings import Settings
from service.wire.create_request import CreateRequest
from service.wire.decode import parse_create_body
from service.wire.depth import check_nesting
from service.wire.errors import ErrorBody, ErrorDetail

CLIENT_EVENT = "response.create"
MAX_LANES = 64  # distinct `stream_id`s one connection may open
MAX_LANE_ID = 200  # characters of a `stream_id`
MAX_QUEUED = 32  # `response.create` messages waiting on one lane
# RFC 6455 §7.4.1's "going away" (a server going down): a code both SDKs' reconnection
# treats as recoverable (openai-python `src/openai/types/websocket_reconnection.py`).
GOING_AWAY = 1001
RETRY_AFTER_S = 1  # the hint of a create refused while the connection drains
_json = msgspec.json.Decoder()


class Gone(Exception):
    """The client can no longer be written to (it left, or the send deadline dropped it);
    the receive loop sees the disconnect and ends the connection."""


class TooLarge(Exception):
    """A message over the size a create body may have."""


class Queued(msgspec.Struct, frozen=True):
    """A create waiting on its lane, and its bytes' hold on the connection's and the
    key's bounds, released when its turn ends."""

    req: CreateRequest
    held: Slot


class WsErrorDetail(msgspec.Struct, frozen=True, omit_defaults=True):
    """openai-python `ResponseWsErrorError`: OpenAI's error, and the headers that an HTTP
    answer of it would carry (`retry-after` on a 429 or a 503), when it has any."""

    message: str
    type: str
    param: str | None
    code: str | None
    headers: dict[str, str] | None = None


class WsError(msgspec.Struct, frozen=True, omit_defaults=True):
    """openai-python `ResponseWsError`: an error event; `stream_id` when the message
    that caused it named one."""

    type: str
    status: int
    error: WsErrorDetail
    stream_id: str | None = None


def with_lane(data: bytes, lane: Lane) -> bytes:
    """A stored event's JSON with the lane's `stream_id` added (as OpenAI's events echo
    it); the event itself as stored when the message named no lane."""
    if lane is None:
        return data
    return data[:-1] + b',"stream_id":' + msgspec.json.encode(lane) + b"}"


@websocket("/v1/responses", name="responses_socket")
async def responses_socket(
    socket: WebSocket[Any, Any, Any],
    bundle: Bundle,
    settings: Settings,
    access: Access,
    stopping: asyncio.Event,
) -> None:
    rid = f"req_{uuid.uuid4().hex}"
    socket.scope.setdefault("state", {})["request_id"] = rid  # for the send deadline's log
    try:
        principal = await access.admit(bearer(socket.headers.get("authorization")))
        slot = access.open_stream(principal)
    except Exception as exc:
        await _deny(socket, refusal(exc, rid), rid)
        return
    try:
        await socket.accept(headers={"x-request-id": rid})
        session = SocketSession(bundle, principal.owner)
        await Connection(socket, session, access, principal, rid).run(settings, stopping)
    finally:
        slot.release()


async def _deny(socket: WebSocket[Any, Any, Any], refused: Refusal, rid: str) -> None:
    """Refuse the handshake with an HTTP answer (ASGI `websocket.http.response`)."""
    body = msgspec.json.encode(ErrorBody(refused.error))
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", rid.encode()),
        *((k.lower().encode(), v.encode()) for k, v in (refused.headers or {}).items()),
    ]
    start: Any = {
        "type": "websocket.http.response.start",
        "status": refused.status,
        "headers": headers,
    }
    await socket.send(start)
    end: Any = {"type": "websocket.http.response.body", "body": body}
    await socket.send(end)


class Connection:
    """One open socket: reads messages, queues each create on its lane, writes events."""

    def __init__(
        self,
        socket: WebSocket[Any, Any, Any],
        session: SocketSession,
        access: Access,
        principal: Principal,
        rid: str,
    ) -> None:
        self.socket, self.session, self.rid = socket, session, rid
        self.access, self.principal = access, principal
        self.lanes: dict[Lane, tuple[asyncio.Queue[Queued], asyncio.Task[None]]] = {}
        self.streaming = 0  # responses being written now
        self.queued_bytes = 0  # of the messages queued or streaming now
        self.idle_since = asyncio.get_running_loop().time()
        self._write = asyncio.Lock()
        self.draining = False  # the process is stopping: no new create is taken
        self._turned = asyncio.Event()  # set whenever a turn ends (a drain waits on it)

    async def run(self, settings: Settings, stopping: asyncio.Event) -> None:
        """Serve messages until the client leaves, the connection idles out or the process
        stopped and the connection drained; then stop every lane (a response still
        streaming is then left as a dropped SSE client leaves it: cancelled with reason
        `client_disconnected` unless it is a background one)."""
        drain = asyncio.create_task(self._drain(stopping, settings.shutdown_grace_s))
        try:
            while (data := await self._next(settings.ws_idle_timeout_s)) is not None:
                await self._accept(data, settings)
        except Gone:
            pass
        finally:
            drain.cancel()
            await asyncio.gather(drain, return_exceptions=True)
            await self._stop()

    async def _drain(self, stopping: asyncio.Event, grace_s: float) -> None:
        """Once the process stops: let what was accepted end (for `grace_s` at most), then
        close with 1001, the code after which the SDKs reconnect (to another replica, or to
        this server once it is back). The receive loop then sees the disconnect."""
        await stopping.wait()
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while self._busy() and (left := deadline - loop.time()) > 0:
            self._turned.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._turned.wait(), left)
        async with self._write:  # not in the middle of an event
            with contextlib.suppress(Exception):  # the client left first
                await self.socket.close(GOING_AWAY, "the server is shutting down")

    def _busy(self) -> bool:
        """A response is streaming or a create is waiting on a lane."""
        return self.streaming > 0 or any(not queue.empty() for queue, _ in self.lanes.values())

    async def _stop(self) -> None:
        """Cancel the lanes and let go of all the connection holds, at once. A cancelled
        lane task keeps its `CancelledError`, whose traceback holds the lane's frames and
        so this connection: while `lanes` held the tasks, that was a reference cycle, freed
        only by a full collection (which the server defers: adapters/cli/memory.py), and
        with it every queued message and the cache. Dropping the tasks, the queues and
        the cache here gives the memory back as the connection ends."""
        lanes, self.lanes = list(self.lanes.values()), {}
        for _, task in lanes:
            task.cancel()
        await asyncio.gather(*(task for _, task in lanes), return_exceptions=True)
        for queue, _ in lanes:
            while not queue.empty():
                queue.get_nowait().held.release()
        self.session.close()

    async def _next(self, idle_s: float) -> str | bytes | None:
        """The next message's data; None once the client left or the connection was idle
        (no message, nothing streaming) for `idle_s` seconds."""
        loop = asyncio.get_running_loop()
        while True:
            wait = None if idle_s <= 0 else max(0.0, self.idle_since + idle_s - loop.time())
            try:
                message = await asyncio.wait_for(self.socket.receive(), wait)
            except TimeoutError:
                if self.streaming:
                    self.idle_since = loop.time()
                    continue
                if loop.time() - self.idle_since >= idle_s:
                    await self.socket.close(1000, f"idle for {idle_s:g}s")
                    return None
                continue
            if message["type"] == "websocket.disconnect":
                return None
            self.idle_since = loop.time()
            text, data = message.get("text"), message.get("bytes")
            if isinstance(text, str):
                return text
            return data if isinstance(data, bytes) else b""

    async def _accept(self, data: str | bytes, settings: Settings) -> None:
        """Queue a message's create on its lane, or answer it with an error event. A
        refused `response.create` empties its lane's cache, as a failed turn does (a frame
        that is no create at all leaves it)."""
        lane: Lane = None
        create = False
        try:
            body = data.encode() if isinstance(data, str) else data
            raw = self._decode(body, settings)
            lane = _lane_of(raw)
            create = raw.get("type") == CLIENT_EVENT
            if create and self.draining:
                raise Draining
            if create:
                self.access.charge(self.principal)
            req = _create_of(raw, settings)
            queue = self._lane(lane)
            if queue.full():
                raise RateLimited(
                    f"Too many response.create messages waiting on this lane (at most "
                    f"{MAX_QUEUED}); wait for a response to end.",
                    retry_after=1.0,
                )
            queue.put_nowait(Queued(req, self._hold(len(body), settings)))
        except TooLarge:
            await self._refuse(
                Refusal(
                    413,
                    ErrorDetail(
                        f"The message is larger than {settings.max_body_bytes} bytes.",
                        "invalid_request_error",
                        None,
                        "request_too_large",
                    ),
                ),
                lane,
            )
        except Draining:
            await self._refuse(_draining(), lane)
        except (InvalidRequest, RateLimited) as exc:
            if create:
                self.session.forget(lane)
            await self._refuse(refusal(exc, self.rid), lane)

    def _decode(self, body: bytes, settings: Settings) -> dict[str, Any]:
        if len(body) > settings.max_body_bytes:
            raise TooLarge
        check_nesting(body, settings.limits.max_json_depth)
        try:
            raw = _json.decode(body)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise InvalidRequest(
                f"We could not parse the JSON of your message: {exc}", code="invalid_json"
            ) from exc
        if not isinstance(raw, dict):
            raise InvalidRequest("A message must be a JSON object.", code="invalid_json")
        return raw

    def _hold(self, size: int, settings: Settings) -> Slot:
        """Count a message's bytes against the connection's bound and its key's until its
        turn ends; `RateLimited` past either (one message alone is always let through,
        as it is no larger than a create body may be)."""
        limit = settings.ws_max_queued_bytes
        if self.queued_bytes and 0 < limit < self.queued_bytes + size:
            raise RateLimited(
                f"Too many bytes of response.create messages waiting on this connection: "
                f"{self.queued_bytes} held, at most {limit}; wait for a response to end.",
                retry_after=1.0,
            )
        key = self.access.queued.hold(
            self.principal.key_id, size, settings.ws_max_queued_bytes_per_key
        )
        self.queued_bytes += size

        def release() -> None:
            self.queued_bytes -= size
            key.release()

        return Slot(release)

    def _lane(self, lane: Lane) -> asyncio.Queue[Queued]:
        if lane not in self.lanes:
            if len(self.lanes) >= MAX_LANES:
                raise InvalidRequest(
                    f"Too many lanes: at most {MAX_LANES} stream_ids on one connection.",
                    param="stream_id",
                    code="invalid_value",
                )
            queue: asyncio.Queue[Queued] = asyncio.Queue(MAX_QUEUED)
            self.lanes[lane] = (queue, asyncio.create_task(self._serve_lane(lane, queue)))
        return self.lanes[lane][0]

    async def _serve_lane(self, lane: Lane, queue: asyncio.Queue[Queued]) -> None:
        while True:
            queued = await queue.get()
            try:
                await self._turn(lane, queued.req)
            finally:
                queued.held.release()
                del queued  # not kept by this frame while the lane waits for the next

    async def _turn(self, lane: Lane, req: CreateRequest) -> None:
        """One response: created, its events written as the log has them. Any failure
        is an error event on the lane, which also empties the lane's cache."""
        try:
            # The connection's own slot covers one response at a time; more at once cost a
            # slot each, as the same responses over SSE would.
            extra = self.access.open_stream(self.principal) if self.streaming else None
        except RateLimited as exc:
            self.session.forget(lane)
            await self._refuse(refusal(exc, self.rid), lane)
            return
        self.streaming += 1
        try:
            events = await self.session.create(lane, req)
            async with contextlib.aclosing(events):
                async for event in events:
                    await self._send(with_lane(event.data, lane))
        except Gone:
            return
        except Exception as exc:  # refused, or the log could not be read on: the socket stays
            self.session.forget(lane)
            await self._refuse(refusal(exc, self.rid), lane)
        finally:
            self.streaming -= 1
            self.idle_since = asyncio.get_running_loop().time()
            if extra is not None:
                extra.release()
            self._turned.set()

    async def _refuse(self, refused: Refusal, lane: Lane) -> None:
        # The spec's `WebSocketErrorEvent` requires a code: an error that has none over
        # HTTP (OpenAI's body allows null) is given its type as the code.
        error = refused.error
        headers = {k.lower(): v for k, v in (refused.headers or {}).items()} or None
        detail = WsErrorDetail(
            error.message, error.type, error.param, error.code or error.type, headers
        )
        event = WsError("error", refused.status, detail, stream_id=lane)
        await self._send(msgspec.json.encode(event))

    async def _send(self, data: bytes) -> None:
        async with self._write:
            try:
                await self.socket.send_text(data.decode())
            except Exception as exc:  # WebSocketDisconnect, ClientDisconnected, OSError
                raise Gone from exc


class Draining(Exception):
    """A `response.create` that arrived once the connection began to drain."""


def _draining() -> Refusal:
    """What a create gets while the connection drains: the 503 of a server going away,
    to be sent again once the SDK has reconnected (the socket closes with 1001 next)."""
    detail = ErrorDetail(
        "The server is shutting down and takes no new response on this connection; "
        "send it again once reconnected.",
        "server_error",
        None,
        "server_shutting_down",
    )
    return Refusal(503, detail, {"retry-after": str(RETRY_AFTER_S)})


def _lane_of(raw: dict[str, Any]) -> Lane:
    lane = raw.get("stream_id")
    if lane is not None and not (isinstance(lane, str) and 0 < len(lane) <= MAX_LANE_ID):
        raise InvalidRequest(
            f"Invalid 'stream_id': a string of 1 to {MAX_LANE_ID} characters.",
            param="stream_id",
            code="invalid_value",
        )
    return lane


def _create_of(raw: dict[str, Any], settings: Settings) -> CreateRequest:
    """The create a `response.create` message asks for: its body beside `type` (and the
    lane), always streamed (`stream` is implicit on a socket: absent or true)."""
    kind = raw.get("type")
    if kind != CLIENT_EVENT:
        missing = kind is None
        raise InvalidRequest(
            "Missing required parameter: 'type'."
            if missing
            else f"Invalid 'type': unknown client event {str(kind)[:100]!r}; the only client "
            f"event is '{CLIENT_EVENT}'.",
            param="type",
            code="missing_required_parameter" if missing else "invalid_value",
        )
    if raw.get("stream", True) is not True:
        raise InvalidRequest(
            "Invalid 'stream': responses over a WebSocket are always streamed; omit it.",
            param="stream",
            code="invalid_value",
        )
    generate = raw.get("generate", True)
    if not isinstance(generate, bool):
        raise InvalidRequest(
            "Invalid value for 'generate': Expected `bool`.",
            param="generate",
            code="invalid_value",
        )
    body = {k: v for k, v in raw.items() if k not in ("type", "stream_id", "generate")}
    body["stream"] = True
    req = parse_create_body(msgspec.json.encode(body), settings.limits)
    if generate:
        return req
    # The warm-up is a fact of the request, so the log says why no engine was asked.
    return msgspec.structs.replace(req, generate=False, extra={**req.extra, "generate": False})
