"""The read-only audit view at `/audit`: one static page (adapters/auditview/static, plain
HTML, CSS and JavaScript, no build step) over small JSON endpoints that call the admin
commands' use-cases (service/audit/: `responses list`, `conversation`, `show`'s timeline):

- `GET /audit/api/responses?owner=&model=&status=&reason=&since=&until=&after=&limit=`:
  the read model's rows, newest first, as `resplog responses list --json` prints them
  (`reason`: the end reason its terminal event records, or `completed`);
- `GET /audit/api/conversations?owner=&since=&until=&after=&limit=`: conversations newest
  first, as `resplog conversations list` shows them;
- `GET /audit/api/responses/{id}`: its row, its conversation turn by turn and its event
  timeline (every event with the time it was recorded, the lifecycle moments);
- `GET /audit/api/conversations/{id}`: a conversation's turns in order (`resplog
  conversation conv_…`);
- `GET /audit/api/responses/{id}/events`: its events as SSE, live until the terminal one
  (the `/v1` stream's twin, for any owner; every frame a plain `data:` so that a browser's
  `EventSource.onmessage` sees them all);
- `GET /v1/audit/checkpoints/latest`: the latest signed checkpoint `serve
  --checkpoint-every-s` (or `resplog checkpoint --save`) kept, the file exactly as
  `resplog verify --checkpoint` reads it, its number in `Resplog-Checkpoint`.

A response's detail carries its `integrity` (service/audit/chain.py): its chain checked,
the latest checkpoint and whether it holds the response, its erasure.

An ASGI wrapper around the app, like the metrics one: `--audit-view` decides who may look
(`open`; `key`: `Authorization: Bearer <--audit-key>` or the `resplog_audit` cookie the
page sets from what the auditor types, since an EventSource cannot send a header; `off`:
404). Everything it answers is read-only.
"""

from __future__ import annotations

import asyncio
import hmac
import re
from importlib import resources
from typing import Any, Literal
from urllib.parse import parse_qs, unquote

import msgspec

from adapters.http import sse
from domain.errors import NotFound, ResplogError
from service.audit.chain import integrity
from service.audit.conversation import total_usage
from service.audit.conversations import conversation_turns, list_conversations
from service.audit.live import follow_events
from service.audit.records import listed, listing
from service.audit.responses import list_responses, response_detail
from service.audit.timeline import durations
from service.bundle import Bundle
from service.ports import ChainHead
from service.webhooks.manage import delivery_records

Access = Literal["open", "key", "off"]
COOKIE = "resplog_audit"
CHECKPOINT = "/v1/audit/checkpoints/latest"
STATUSES = ("queued", "in_progress", "completed", "failed", "incomplete", "cancelled")
_STATIC = {
    "/audit": ("index.html", "text/html; charset=utf-8"),
    "/audit/": ("index.html", "text/html; charset=utf-8"),
    "/audit/audit.js": ("audit.js", "text/javascript; charset=utf-8"),
    "/audit/audit.css": ("audit.css", "text/css; charset=utf-8"),
}
_REASON = re.compile(r"^[a-z][a-z0-9_]{0,63}$")  # resplog's reasons and engines' codes
_CONV = re.compile(r"^/audit/api/conversations/(conv_[A-Za-z0-9_-]{1,200})$")
_ONE = re.compile(r"^/audit/api/responses/(resp_[A-Za-z0-9_-]{1,200})(/events)?$")
# A page's scripts come only from the page itself: a prompt shown on it cannot run; and no
# other site may frame it (a framed page can be clicked through unseen).
_CSP = (
    b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    b"frame-ancestors 'none'"
)
_PLAIN_SSE = sse.Framing(lambda e: b"data: ", b"\n\n")


class _BadParam(ResplogError):
    pass


def _error(status: int, message: str, code: str | None = None) -> bytes:
    kind = "invalid_request_error"
    return msgspec.json.encode(
        {"error": {"message": message, "type": kind, "param": None, "code": code}}
    )


def _number(query: dict[str, list[str]], name: str) -> float | None:
    raw = query.get(name, [""])[-1]
    if raw == "":
        return None
    try:
        return float(raw)
    except ValueError:
        raise _BadParam(f"Invalid '{name}': a unix time in seconds.") from None


def _text(query: dict[str, list[str]], name: str) -> str | None:
    raw = query.get(name, [""])[-1].strip()
    return raw or None


def _after(query: dict[str, list[str]], prefix: str) -> str | None:
    after = _text(query, "after")
    if after is not None and not after.startswith(prefix):
        raise _BadParam(f"Invalid 'after': an id ({prefix}…).")
    return after


def _limit(query: dict[str, list[str]]) -> int:
    try:
        limit = int(query.get("limit", ["50"])[-1])
    except ValueError:
        raise _BadParam("Invalid 'limit': an integer from 1 to 200.") from None
    if not 1 <= limit <= 200:
        raise _BadParam("Invalid 'limit': an integer from 1 to 200.")
    return limit


class AuditView:
    """The `/audit` routes over a running process's bundle (its audit ports, through the
    use-cases of service/audit/); every other path goes to `app`."""

    def __init__(self, bundle: Bundle, access: Access, key: str | None) -> None:
        self.bundle = bundle
        self.access = access
        self.key = key

    def asgi(self, app: Any) -> Any:
        async def middleware(scope: Any, receive: Any, send: Any) -> None:
            path = scope.get("path", "") if scope["type"] == "http" else ""
            if path != "/audit" and not path.startswith("/audit/") and path != CHECKPOINT:
                await app(scope, receive, send)
                return
            await self._serve(scope, receive, send, path)

        return middleware

    async def _serve(self, scope: Any, receive: Any, send: Any, path: str) -> None:
        # The request log names the route by its template, never an id (as litestar's).
        scope["path_template"] = _template(path)
        if self.access == "off" or scope["method"] not in ("GET", "HEAD"):
            await _answer(send, 404, _error(404, "Not found."), "application/json")
            return
        if path in _STATIC:
            name, kind = _STATIC[path]
            body = resources.files(__package__).joinpath("static", name).read_bytes()
            await _answer(send, 200, body, kind)
            return
        if self.access == "key" and not _authorised(scope, self.key):
            message = "The audit view needs the audit key."
            await _answer(send, 401, _error(401, message, "invalid_api_key"), "application/json")
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        try:
            if path == CHECKPOINT:
                await self._checkpoint(send)
                return
            if path == "/audit/api/responses":
                await _json(send, await self._list(query))
                return
            if path == "/audit/api/conversations":
                await _json(send, await self._conversations(query))
                return
            conv = _CONV.match(path)
            if conv is not None:
                await _json(send, await self._conversation(conv.group(1)))
                return
            match = _ONE.match(path)
            if match is None:
                raise NotFound("Not found.")
            if match.group(2):
                await self._follow(receive, send, match.group(1))
                return
            await _json(send, await self._one(match.group(1)))
        except _BadParam as exc:
            await _answer(send, 400, _error(400, str(exc)), "application/json")
        except NotFound as exc:
            await _answer(send, 404, _error(404, str(exc)), "application/json")
        except ResplogError as exc:  # a damaged log: say so, as `show` does
            await _answer(send, 422, _error(422, str(exc)), "application/json")

    async def _list(self, query: dict[str, list[str]]) -> dict[str, Any]:
        status = [s for s in query.get("status", []) if s]
        for s in status:
            if s not in STATUSES:
                raise _BadParam(f"Invalid 'status': {s!r} is none of {', '.join(STATUSES)}.")
        reason = _text(query, "reason")
        if reason is not None and not _REASON.match(reason):
            raise _BadParam("Invalid 'reason': an end reason such as worker_lost.")
        page = await list_responses(
            self.bundle.audit,
            owner=_text(query, "owner"),
            status=status or None,
            model=_text(query, "model"),
            since=_number(query, "since"),
            until=_number(query, "until"),
            include_deleted=True,
            end_reason=reason,
            after=_after(query, "resp_"),
            limit=_limit(query),
        )
        return listing(page)

    async def _conversations(self, query: dict[str, list[str]]) -> dict[str, Any]:
        limit = _limit(query)
        found = await list_conversations(
            self.bundle.audit,
            _text(query, "owner"),
            limit,
            since=_number(query, "since"),
            until=_number(query, "until"),
            after=_after(query, "conv_"),
        )
        rows = [msgspec.to_builtins(c) for c in found.rows]
        last = rows[-1]["id"] if rows else None
        return {"data": rows, "has_more": found.has_more, "last_id": last}

    async def _checkpoint(self, send: Any) -> None:
        latest = await self.bundle.audit.ledger.latest_checkpoint()
        if latest is None:
            raise NotFound("No checkpoint yet: see serve --checkpoint-every-s.")
        await _answer(
            send,
            200,
            latest.body,
            "application/json",
            ((b"resplog-checkpoint", b"%d" % latest.number),),
        )

    async def _one(self, rid: str) -> dict[str, Any]:
        found = await response_detail(self.bundle.audit, rid)
        moments = found.folded.moments
        record = found.record
        head = None if record is None else ChainHead(rid, record.version, record.head_digest)
        state = await integrity(self.bundle.audit.ledger, rid, head)
        return {
            "integrity": msgspec.to_builtins(state),
            "row": None if found.record is None else listed(found.record),
            "turns": msgspec.to_builtins(found.turns),
            "missing": found.missing,
            "usage": msgspec.to_builtins(found.folded.usage),
            "moments": msgspec.to_builtins(moments),
            "durations": msgspec.to_builtins(durations(moments)),
            "events": msgspec.to_builtins(found.events),
            "webhooks": await self._webhooks(rid),
        }

    async def _webhooks(self, rid: str) -> list[Any]:
        """The response's webhook deliveries, each with every attempt (never a secret)."""
        store = self.bundle.audit.webhooks
        if store is None:
            return []
        found = await delivery_records(store, response_id=rid)
        return [msgspec.to_builtins(r) for r in found]

    async def _conversation(self, cid: str) -> dict[str, Any]:
        turns = await conversation_turns(self.bundle.audit, cid)
        return {
            "id": cid,
            "turns": msgspec.to_builtins(turns),
            "usage": msgspec.to_builtins(total_usage(turns)),
        }

    async def _follow(self, receive: Any, send: Any, rid: str) -> None:
        tail = await follow_events(self.bundle, rid)
        headers = [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})

        async def stream() -> None:
            async for chunk in sse.frames(tail, keepalive_s=15.0, framing=_PLAIN_SSE):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

        # A closed tab ends the tail now, not when the response ends (a queued one may wait
        # long): the stream races the client's disconnect.
        streaming = asyncio.create_task(stream())
        leaving = asyncio.create_task(_disconnected(receive))
        try:
            await asyncio.wait({streaming, leaving}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (streaming, leaving):
                task.cancel()
            await asyncio.gather(streaming, leaving, return_exceptions=True)
        failure = None if streaming.cancelled() else streaming.exception()
        if failure is not None:
            raise failure


async def _disconnected(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _template(path: str) -> str:
    if path == CHECKPOINT:
        return path
    if path in _STATIC or path in ("/audit/api/responses", "/audit/api/conversations"):
        return path
    if _CONV.match(path):
        return "/audit/api/conversations/{id}"
    match = _ONE.match(path)
    if match is None:
        return "/audit/{path}"
    return "/audit/api/responses/{id}" + (match.group(2) or "")


def _authorised(scope: Any, key: str | None) -> bool:
    if not key:
        return False
    headers = dict(scope.get("headers") or [])
    given = headers.get(b"authorization", b"")
    if hmac.compare_digest(given, f"Bearer {key}".encode()):
        return True
    for part in headers.get(b"cookie", b"").decode("latin-1").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and hmac.compare_digest(unquote(value).encode(), key.encode()):
            return True
    return False


async def _json(send: Any, value: Any) -> None:
    await _answer(send, 200, msgspec.json.encode(value), "application/json")


async def _answer(
    send: Any,
    status: int,
    body: bytes,
    content_type: str,
    extra: tuple[tuple[bytes, bytes], ...] = (),
) -> None:
    headers = [
        *extra,
        (b"content-type", content_type.encode()),
        (b"content-length", b"%d" % len(body)),
        (b"cache-control", b"no-store"),
        (b"content-security-policy", _CSP),
        (b"x-content-type-options", b"nosniff"),
        (b"x-frame-options", b"DENY"),  # `frame-ancestors` for browsers without CSP 2
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
