"""Prometheus metrics of one `serve` process, at `GET /metrics` (text exposition format).

Two sources: an ASGI middleware around the app (every request: route template, method,
status, duration; requests in flight) and the log writer's flush report (flush size,
latency and failures; what is queued; and, read from the committed events themselves,
responses ended by status and reason, tokens by model, and the time from a response's
creation to its first output in this process). Label values are bounded: routes are
templates (`/v1/responses/{id}`), never ids; models are those the engine serves; reasons
are resplog's own closed set.

Access (`--metrics`): `open` serves anyone who can reach the port; `key` wants
`Authorization: Bearer <--metrics-key>` (a scrape token of its own, not an API key); `off`
answers 404; `auto` (the default) is `open` on a loopback bind, `key` when a metrics key is
set, else `off`. Each process counts what it did: a `resplog worker` has no HTTP port and is
not scraped here.
"""

from __future__ import annotations

import hmac
import re
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal

import msgspec
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from service.ports import StoredEvent

Access = Literal["open", "key", "off"]

_ROUTES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(p), t)
    for p, t in (
        (r"^/v1/responses$", "/v1/responses"),
        (r"^/v1/responses/input_tokens$", "/v1/responses/input_tokens"),
        (r"^/v1/responses/compact$", "/v1/responses/compact"),
        (r"^/v1/responses/[^/]+$", "/v1/responses/{id}"),
        (r"^/v1/responses/[^/]+/cancel$", "/v1/responses/{id}/cancel"),
        (r"^/v1/responses/[^/]+/events$", "/v1/responses/{id}/events"),
        (r"^/v1/responses/[^/]+/input_items$", "/v1/responses/{id}/input_items"),
        (r"^/v1/models$", "/v1/models"),
        (r"^/health$", "/health"),
        (r"^/ready$", "/ready"),
        (r"^/openapi\.json$", "/openapi.json"),
    )
]
_OUTPUT_TYPES = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.reasoning_text.delta",
        "response.reasoning.delta",  # the Open Responses naming (--reasoning-events)
        "response.reasoning_summary_text.delta",
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
    }
)
_TERMINAL_TYPES = frozenset(
    {"response.completed", "response.failed", "response.incomplete", "response.cancelled"}
)
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_MAX_STARTS = 10_000  # creations waiting for their first output (oldest forgotten first)


def route_of(path: str) -> str:
    """The route template of a path; "other" for any path the API does not have."""
    for pattern, template in _ROUTES:
        if pattern.match(path):
            return template
    return "other"


class _Final(msgspec.Struct, frozen=True):
    status: str = ""
    model: str = ""
    usage: dict[str, Any] | None = None


class _Terminal(msgspec.Struct, frozen=True):
    response: _Final


class _End(msgspec.Struct, frozen=True):
    reason: str = ""


_terminal = msgspec.json.Decoder(_Terminal)
_end = msgspec.json.Decoder(_End)


class Metrics:
    """The registry and its metrics; `flushed` is the writer's observer (`LogObserver`)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "resplog_http_requests",
            "HTTP requests answered.",
            ["method", "route", "status"],
            registry=r,
        )
        self.duration = Histogram(
            "resplog_http_request_duration_seconds",
            "Time to answer an HTTP request (a stream: until it ends).",
            ["method", "route"],
            buckets=_SECONDS,
            registry=r,
        )
        self.in_flight = Gauge(
            "resplog_http_requests_in_flight",
            "HTTP requests (streams included) open now.",
            registry=r,
        )
        self.ended = Counter(
            "resplog_responses_ended",
            "Responses ended, by status and end reason.",
            ["status", "reason"],
            registry=r,
        )
        self.tokens = Counter(
            "resplog_tokens", "Tokens of ended responses.", ["model", "kind"], registry=r
        )
        self.first_output = Histogram(
            "resplog_first_output_seconds",
            "From a response's creation to its first output event, both committed here.",
            buckets=_SECONDS,
            registry=r,
        )
        self.flushes = Histogram(
            "resplog_log_flush_seconds",
            "Time to commit one flush of the log writer.",
            buckets=_SECONDS,
            registry=r,
        )
        self.flush_events = Histogram(
            "resplog_log_flush_events",
            "Events committed by one flush.",
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000),
            registry=r,
        )
        self.flush_failures = Counter(
            "resplog_log_append_failures",
            "Appends a flush could not commit (conflicts, refusals, outages).",
            registry=r,
        )
        self.queued = Gauge(
            "resplog_log_queued_events", "Events waiting for the log writer.", registry=r
        )
        self._starts: OrderedDict[str, float] = OrderedDict()

    # --- the log writer's report ----------------------------------------------------------

    def flushed(
        self, committed: Sequence[StoredEvent], seconds: float, failed: int, queued: int
    ) -> None:
        self.flushes.observe(seconds)
        self.flush_events.observe(len(committed))
        if failed:
            self.flush_failures.inc(failed)
        self.queued.set(queued)
        for event in committed:
            self._event(event)

    def _event(self, event: StoredEvent) -> None:
        if event.type == "response.created":
            self._starts[event.stream_id] = event.recorded_at
            while len(self._starts) > _MAX_STARTS:
                self._starts.popitem(last=False)
        elif event.type in _OUTPUT_TYPES:
            began = self._starts.pop(event.stream_id, None)
            if began is not None:
                self.first_output.observe(max(0.0, event.recorded_at - began))
        elif event.type in _TERMINAL_TYPES:
            self._starts.pop(event.stream_id, None)
            self._ended(event)

    def _ended(self, event: StoredEvent) -> None:
        try:
            final = _terminal.decode(event.data).response
            reason = _end.decode(event.facts).reason if event.facts else ""
        except msgspec.DecodeError:
            return
        self.ended.labels(final.status, reason or final.status).inc()
        usage = final.usage or {}
        for kind in ("input", "output"):
            count = usage.get(f"{kind}_tokens")
            if isinstance(count, int) and count > 0:
                self.tokens.labels(final.model, kind).inc(count)

    # --- HTTP -----------------------------------------------------------------------------

    def asgi(self, app: Any, access: Access, key: str | None) -> Any:
        """`app` with every request measured and `GET /metrics` answered (per `access`)."""

        async def middleware(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            if scope["path"] == "/metrics":
                await self._scrape(scope, send, access, key)
                return
            status = [500]

            async def sending(message: Any) -> None:
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                await send(message)

            route, began = route_of(scope["path"]), time.perf_counter()
            self.in_flight.inc()
            try:
                await app(scope, receive, sending)
            finally:
                self.in_flight.dec()
                self.requests.labels(scope["method"], route, str(status[0])).inc()
                self.duration.labels(scope["method"], route).observe(time.perf_counter() - began)

        return middleware

    async def _scrape(self, scope: Any, send: Any, access: Access, key: str | None) -> None:
        if access == "off":
            await _answer(
                send,
                404,
                b'{"error":{"message":"Not found.","type":'
                b'"invalid_request_error","param":null,"code":null}}',
                "application/json",
            )
            return
        if access == "key" and not _authorised(scope, key):
            await _answer(
                send,
                401,
                b'{"error":{"message":"Metrics need the scrape key.",'
                b'"type":"invalid_request_error","param":null,"code":"invalid_api_key"}}',
                "application/json",
            )
            return
        await _answer(send, 200, generate_latest(self.registry), CONTENT_TYPE_LATEST)


def _authorised(scope: Any, key: str | None) -> bool:
    given = dict(scope.get("headers") or []).get(b"authorization", b"")
    return bool(key) and hmac.compare_digest(given, f"Bearer {key}".encode())


async def _answer(send: Any, status: int, body: bytes, content_type: str) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
