"""What both HTTP engine adapters share: timeouts, opening a streamed POST, reading its
server-sent events under deadlines, and turning every transport failure into an
`EngineError` whose code says what kind of failure it was.

Failure codes: `engine_unavailable` (cannot connect), `engine_timeout` (connect, first token
or between tokens), `engine_unauthorized` (401/403), `engine_bad_request` (other 4xx),
`engine_overloaded` (429/503), `engine_http_error` (other 5xx), `engine_disconnected` (the
server dropped the stream), `engine_protocol_error` (the stream is not what the protocol
says). The adapters add their own on top (see docs/engines.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Self

import aiohttp

from domain.errors import EngineError
from domain.generation import AnyDelta


@dataclass(frozen=True)
class Timeouts:
    """Seconds. `first_token` covers queueing and prefill; `between_tokens` a stall."""

    connect: float = 10.0
    first_token: float = 600.0
    between_tokens: float = 120.0
    request: float = 30.0  # the short calls: model info, health
    abort: float = 5.0  # telling the engine to stop; short, as it runs while closing


def error_detail(body: bytes) -> str:
    """The message of an error body, whichever server shape it has (sglang's
    `{"error": {"message"}}`, `{"error": "Unauthorized"}`, `{"object": "error", "message"}`,
    FastAPI's `{"detail"}`), else the text itself."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:500] or "(empty body)"
    return _message_of(data) or text[:500]


def _message_of(data: Any) -> str | None:
    if isinstance(data, str):
        return data
    if not isinstance(data, dict):
        return None
    for key in ("error", "message", "detail"):
        value = data.get(key)
        if isinstance(value, dict):
            inner = _message_of(value)
            if inner:
                return inner
        elif isinstance(value, str) and value:
            return value
    return None


def status_error(what: str, status: int, body: bytes) -> EngineError:
    if status in (401, 403):
        code = "engine_unauthorized"
    elif status in (429, 503):
        code = "engine_overloaded"
    elif 400 <= status < 500:
        code = "engine_bad_request"
    else:
        code = "engine_http_error"
    detail = error_detail(body)
    said = detail if code == "engine_bad_request" else None  # a refusal, in its own words
    return EngineError(f"{what} answered HTTP {status}: {detail}", code=code, said=said)


def transport_error(what: str, e: BaseException) -> EngineError:
    """A failure below HTTP, named for what it means to an operator."""
    detail = str(e) or type(e).__name__
    if isinstance(e, aiohttp.ConnectionTimeoutError):
        return EngineError(f"timed out connecting to {what}: {detail}", code="engine_timeout")
    if isinstance(e, aiohttp.ClientConnectorError):
        return EngineError(f"cannot connect to {what}: {detail}", code="engine_unavailable")
    if isinstance(e, aiohttp.ServerTimeoutError | TimeoutError):
        return EngineError(f"{what} timed out: {detail}", code="engine_timeout")
    return EngineError(
        f"{what} dropped the connection mid-stream: {detail}", code="engine_disconnected"
    )


# What a failed exchange with an engine server raises below HTTP.
TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)


class HttpClient:
    """The engine adapters' HTTP: one aiohttp session, opened on first use (it must be made
    inside the event loop), with the engine's API key on every request.

    aiohttp rather than httpx for one reason: `readany()` hands over everything the
    connection has buffered, already de-chunked in C, so a reader that comes back after a
    while (its consumer was busy) gets all the tokens that arrived meanwhile in one call;
    httpx yields one HTTP chunk (one token) per call through several layers of async
    generators, which was most of resplog's CPU per token at streaming rates.
    """

    def __init__(self, timeouts: Timeouts, api_key: str | None, max_connections: int = 1024):
        self.timeouts = timeouts
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # Reads are unbounded here: the stream readers apply their own deadlines, so a
            # timeout can say whether the first token or a later one was late.
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeouts.connect)
            connector = aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0)
            self._session = aiohttp.ClientSession(
                headers=self._headers, timeout=timeout, connector=connector
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _short(self, seconds: float | None = None) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(
            total=seconds or self.timeouts.request, sock_connect=self.timeouts.connect
        )

    async def get_json(self, url: str, what: str) -> Any:
        """GET a JSON document; `EngineError` if the server fails or answers non-2xx."""
        try:
            async with self.session().get(url, timeout=self._short()) as response:
                status, content = response.status, await response.read()
        except TRANSPORT_ERRORS as e:
            raise transport_error(what, e) from e
        if status >= 400:
            raise status_error(what, status, content)
        try:
            return json.loads(content)
        except ValueError as e:
            raise EngineError(
                f"{what} at {url} did not answer JSON: {preview(content)}",
                code="engine_protocol_error",
            ) from e

    async def post_json(self, url: str, body: Any, what: str) -> tuple[int, Any]:
        """POST a short JSON call: its status and, for a 2xx, its JSON body (else None);
        `EngineError` if it failed below HTTP or a 2xx body is not JSON."""
        try:
            async with self.session().post(url, json=body, timeout=self._short()) as response:
                status, content = response.status, await response.read()
        except TRANSPORT_ERRORS as e:
            raise transport_error(what, e) from e
        if status >= 300:
            return status, None
        try:
            return status, json.loads(content)
        except ValueError as e:
            raise EngineError(
                f"{what} at {url} did not answer JSON: {preview(content)}",
                code="engine_protocol_error",
            ) from e

    async def status(
        self,
        method: str,
        url: str,
        json_body: Any = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> int | None:
        """The status of a short call (health, abort), or None if it failed below HTTP;
        `headers` replace the session's of the same name (another key for this call)."""
        timeout = self._short(self.timeouts.abort if method == "POST" else None)
        try:
            async with self.session().request(
                method, url, json=json_body, timeout=timeout, headers=headers
            ) as response:
                await response.read()
                return response.status
        except TRANSPORT_ERRORS:
            return None

    async def open_stream(
        self, url: str, body: dict[str, Any], what: str, deadline: _Deadline
    ) -> aiohttp.ClientResponse:
        """POST and return the streamed response once its headers are in (status 200);
        any other status is read and raised as an `EngineError`."""
        try:
            async with asyncio.timeout_at(deadline.at):
                response = await self.session().post(url, json=body)
        except TimeoutError as e:
            raise _timeout(what, deadline) from e
        except TRANSPORT_ERRORS as e:
            raise transport_error(what, e) from e
        if response.status != 200:
            try:
                content = await response.read()
            except TRANSPORT_ERRORS:
                content = b""
            finally:
                response.close()
            raise status_error(what, response.status, content)
        return response


class HttpEngine:
    """What the HTTP engines share: their client, the name their errors give the upstream,
    closing, and use as an async context manager (started on entry, closed on exit)."""

    def __init__(self, timeouts: Timeouts, api_key: str | None, what: str) -> None:
        self.timeouts = timeouts
        self._http = HttpClient(timeouts, api_key)
        self._what = what

    async def start(self) -> None:
        raise NotImplementedError

    def models(self) -> list[str]:
        raise NotImplementedError

    def serves(self, model: str) -> bool:
        return model in self.models()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Deadline:
    """The first event may take `first` seconds from the request; each later read may wait
    `between` seconds on the server (time the consumer spends between reads is not counted).
    """

    def __init__(self, first: float, between: float) -> None:
        self.between = between
        self.started = False
        self.first_at = asyncio.get_running_loop().time() + first

    @property
    def at(self) -> float:
        if not self.started:
            return self.first_at
        return asyncio.get_running_loop().time() + self.between

    def advance(self) -> None:
        self.started = True


def _timeout(what: str, deadline: _Deadline) -> EngineError:
    if deadline.started:
        return EngineError(
            f"{what} sent nothing for {deadline.between:g} s between tokens",
            code="engine_timeout",
        )
    return EngineError(f"{what} sent no first token in time", code="engine_timeout")


Read = Callable[[], Awaitable[bytes]]  # all bytes buffered now (waits for some); b"" at the end


async def sse_events(read: Read, what: str, deadline: _Deadline) -> AsyncGenerator[bytes, None]:
    """The `data` of each server-sent event, one at a time (see `sse_batches`)."""
    async with contextlib.aclosing(sse_batches(read, what, deadline)) as batches:
        async for batch in batches:
            for data in batch:
                yield data


async def sse_batches(
    read: Read, what: str, deadline: _Deadline
) -> AsyncGenerator[list[bytes], None]:
    """The `data` of the server-sent events each read completed (multi-line data joined by
    newlines), under the deadline; ends when the body does.

    Reads everything buffered at once and splits it itself: one deadline and one split per
    read rather than per line or per event, which is most of the per-token cost at
    streaming rates. A read happens only when the consumer asks for more, so the time it
    spends elsewhere is not the server's and whatever arrived meanwhile is one read.
    """
    buffer = b""
    while True:
        if not (chunk := await _next_chunk(read, what, deadline)):
            break
        buffer += chunk
        if b"\r" in buffer:  # CRLF framing is legal SSE; sglang and vLLM send LF
            buffer = buffer.replace(b"\r\n", b"\n")
        if b"\n\n" not in buffer:
            continue
        *events, buffer = buffer.split(b"\n\n")
        batch = [data for event in events if (data := _data(event)) is not None]
        if batch:
            yield batch
    if (data := _data(buffer)) is not None:
        yield [data]


class Reading:
    """How a stream read by `read_deltas` ended: `done` once `[DONE]` arrived."""

    done = False


async def read_deltas(
    read: Read,
    what: str,
    deadline: _Deadline,
    on_chunk: Callable[[bytes], list[AnyDelta]],
    reading: Reading,
) -> AsyncGenerator[AnyDelta, None]:
    """The deltas of a stream up to `[DONE]`, each as `on_chunk` parsed it from its chunk.

    Nothing is merged here: batching deltas into events is the runner's (it knows when the
    log is busy). Each chunk's deltas are yielded before the next chunk is parsed, so a
    broken chunk fails the stream after everything that came before it.
    """
    async with contextlib.aclosing(sse_batches(read, what, deadline)) as reads:
        async for batch in reads:
            for data in batch:
                if data == b"[DONE]":
                    reading.done = True
                    return
                for delta in on_chunk(data):
                    yield delta


def _data(event: bytes) -> bytes | None:
    """The data field of one event; other fields (`event:`, `id:`, comments) carry nothing
    these protocols use."""
    lines = [
        line[6:] if line.startswith(b"data: ") else line[5:]
        for line in event.split(b"\n")
        if line.startswith(b"data:")
    ]
    return b"\n".join(lines) if lines else None


async def _next_chunk(read: Read, what: str, deadline: _Deadline) -> bytes:
    try:
        async with asyncio.timeout_at(deadline.at):
            chunk = await read()
    except TimeoutError as e:
        raise _timeout(what, deadline) from e
    except TRANSPORT_ERRORS as e:
        raise transport_error(what, e) from e
    deadline.advance()
    return chunk


def preview(data: bytes | str, limit: int = 200) -> str:
    """The start of a payload, as text, for an error message."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return repr(text[:limit])


def protocol_error(what: str, detail: str) -> EngineError:
    return EngineError(
        f"{what} broke its streaming protocol: {detail}", code="engine_protocol_error"
    )


def deadline(timeouts: Timeouts) -> _Deadline:
    return _Deadline(timeouts.first_token, timeouts.between_tokens)
