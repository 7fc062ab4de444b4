"""The HTTP response of a stream of events (SSE or JSON Lines): litestar's `Stream`, with
an ASGI body of our own that does two things litestar's does not.

- **The last write carries the end of the body.** A body's writes go out as they come,
  each an `http.response.body` with `more_body: True`; litestar then ends the body with an
  empty one, which uvicorn sends as a write of its own (the chunked encoding's `0\\r\\n\\r\\n`).
  `frames` marks its final write (`Last`), and it goes out with `more_body: False`: one
  write to the client less for every stream, and one pass less through the middlewares'
  `send`. The final write waits until the body's generator has finished, so that the
  stream's cleanup (its tail dropped, its stream slot released) is done before the client
  sees the end, as it was before.
- **A create's stream sends its head with its first events** (`head_with_first`): they
  are committed before the create's handler returns, so they are ready at once, and the
  head and the first write leave in the same turn of the loop, which the connection
  coalesces into one write (adapters/cli/protocol.py). Other streams (a replay, a resume,
  a conversation) send their head at once, as before: their first event may be a while
  coming, and a client waits for the head before it reads.
- **The connection says when the client goes away**, where litestar runs the body in an
  anyio task group beside a listener (a cancel scope, a task group and a task handle for
  every stream). The body runs in the request's own task, and a callback registered in
  the scope (`ON_GONE`, run by `serve`'s connection protocol when the connection is lost
  before the response is complete: adapters/cli/protocol.py) cancels it; that
  cancellation ends the body as litestar's did (the generator's `finally` runs, the
  request's task goes on). Any other cancellation of the task is not absorbed
  (`Task.uncancel`, as `asyncio.timeout` does it). Under a server that does not offer the
  callback, one plain asyncio task waits on `receive` for `http.disconnect` instead.
"""

from __future__ import annotations

import asyncio
import itertools
import weakref
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from litestar.background_tasks import BackgroundTask, BackgroundTasks
from litestar.connection import Request
from litestar.datastructures import Cookie
from litestar.enums import MediaType
from litestar.response import Stream
from litestar.response.base import ASGIResponse
from litestar.response.streaming import ASGIStreamingResponse
from litestar.types import HTTPResponseBodyEvent, Receive, Scope, Send, TypeEncodersMap
from litestar.utils.helpers import get_enum_string_value

from adapters.http.sse import Last
from adapters.http.watch import ON_GONE
from service.access.quotas import Slot


class _Body(ASGIStreamingResponse):
    """The ASGI response: see the module's doc."""

    __slots__ = ("held", "scope", "slot")

    def __init__(self, *, slot: Slot, head_with_first: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slot = slot
        self.held = head_with_first and not self.is_head_response  # the head, until a write
        self.scope: Scope | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        await super().__call__(scope, receive, send)

    async def start_response(self, send: Send) -> None:
        if not self.held:
            await super().start_response(send)

    async def _send(self, send: Send, body: HTTPResponseBodyEvent) -> None:
        if self.held:
            self.held = False
            await super().start_response(send)
        await send(body)

    async def send_body(self, send: Send, receive: Receive) -> None:
        task = asyncio.current_task()
        assert task is not None
        gone = ending = False

        def went() -> None:
            nonlocal gone
            if not ending:
                gone = True
                task.cancel()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            went()  # uvicorn also answers `http.disconnect` once the response is complete

        # Looked up now, not when the response began: the client may have gone meanwhile.
        on_gone: list[Callable[[], None]] | None = (
            None if self.scope is None else self.scope.get(ON_GONE)  # type: ignore[assignment]
        )
        watcher = None
        if on_gone is not None:
            on_gone.append(went)
        else:
            watcher = asyncio.create_task(watch())
        last = b""
        try:
            async for chunk in self.iterator:
                if isinstance(chunk, Last):  # sent with the end, once the generator is done
                    last = bytes(chunk)
                    continue
                body: HTTPResponseBodyEvent = {
                    "type": "http.response.body",
                    "body": chunk if isinstance(chunk, bytes) else chunk.encode(self.encoding),
                    "more_body": True,
                }
                await self._send(send, body)
            self.slot.release()
            ending = True
            end: HTTPResponseBodyEvent = {
                "type": "http.response.body",
                "body": last,
                "more_body": False,
            }
            await self._send(send, end)
        except asyncio.CancelledError:
            if gone and task.uncancel() == 0:
                return  # the client went away: the stream ends here, as litestar's would
            raise
        finally:
            if watcher is not None:
                watcher.cancel()
            else:
                assert on_gone is not None
                on_gone.remove(went)
            self.slot.release()


class EventStream(Stream):
    """A stream of events that holds `slot` (the key's stream quota) until it ends, or
    until it is dropped unsent (a client that left before the body began).
    `head_with_first`: its first events are ready (a create's), so the head waits for them
    (see the module's doc)."""

    __slots__ = ("head_with_first", "slot")

    def __init__(
        self,
        body: AsyncIterator[bytes],
        slot: Slot,
        *,
        media_type: str,
        headers: dict[str, str],
        head_with_first: bool = False,
    ) -> None:
        super().__init__(body, media_type=media_type, headers=headers)
        self.slot = slot
        self.head_with_first = head_with_first
        weakref.finalize(body, slot.release)

    def to_asgi_response(
        self,
        app: Any,
        request: Request[Any, Any, Any],
        *,
        background: BackgroundTask | BackgroundTasks | None = None,
        cookies: Iterable[Cookie] | None = None,
        encoded_headers: Iterable[tuple[bytes, bytes]] | None = None,
        headers: dict[str, str] | None = None,
        is_head_response: bool = False,
        media_type: MediaType | str | None = None,
        status_code: int | None = None,
        type_encoders: TypeEncodersMap | None = None,
    ) -> ASGIResponse:
        # As `Stream.to_asgi_response` (litestar 2), with our body.
        merged = {**headers, **self.headers} if headers is not None else self.headers
        return _Body(
            slot=self.slot,
            head_with_first=self.head_with_first,
            background=self.background or background,
            content_length=0,
            cookies=self.cookies if cookies is None else itertools.chain(self.cookies, cookies),
            encoded_headers=encoded_headers,
            encoding=self.encoding,
            headers=merged,
            is_head_response=is_head_response,
            iterator=self.iterator,
            media_type=get_enum_string_value(media_type or self.media_type or MediaType.JSON),
            status_code=self.status_code or status_code,
        )
