"""Prometheus metrics of one `serve` process, at `GET /metrics` (text exposition format).

Two sources: an ASGI middleware around the app (every request: route template, method,
status, duration; requests in flight) and the log writer's flush report (flush size,
latency and failures; what is queued; and, read from the committed events themselves,
responses ended by status and reason, tokens by model, and the time from a response's
creation to its first output in this process). A third: the process's background work
(`WorkObserver`, service/observe.py): leases claimed and lost, the sweeper's actions,
engine errors; and, read at each scrape, the leases held and the live tails. Label values
are bounded: routes are templates (`/v1/responses/{id}`), never ids; models are those the
engine serves; reasons, sweeper actions and engine error codes are resplog's own closed sets.

Access (`--metrics`): `open` serves anyone who can reach the port; `key` wants
`Authorization: Bearer <--metrics-key>` (a scrape token of its own, not an API key); `off`
answers 404; `auto` (the default) is `open` on a loopback bind, `key` when a metrics key is
set, else `off`. Each process counts what it did; a `resplog worker` serves the same page on
its own `--metrics-port` (`scrape_only`).

Several processes on one port (`serve --processes N`, adapters/cli/processes.py): the parent
sets `PROMETHEUS_MULTIPROC_DIR` to a directory of its own before any child imports
prometheus-client, which then keeps every value in a file per process there; a scrape,
whichever process takes it, merges the files (`MultiProcessCollector`): counters and
histograms are summed over the processes, dead ones included (a total never goes down), and
the gauges are `livesum` (what the live processes hold now, summed).
"""

from __future__ import annotations

import asyncio
import hmac
import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Literal

import msgspec
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from adapters.http.watch import answered, unanswered, watch
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
_CODE = re.compile(r"^[a-z][a-z_]{0,39}$")
_MAX_STARTS = 10_000  # creations waiting for their first output (oldest forgotten first)
_SHARED = "PROMETHEUS_MULTIPROC_DIR"  # prometheus-client's own switch to multiprocess mode
_NOT_FOUND = (
    b'{"error":{"message":"Not found.","type":"invalid_request_error","param":null,"code":null}}'
)


def route_of(path: str) -> str:
    """The route template of a path; "other" for any path the API does not have."""
    for pattern, template in _ROUTES:
        if pattern.match(path):
            return template
    return "other"


def process_gone(shared: str, pid: int) -> None:
    """A process that kept its values in `shared` exited: its gauges leave the live sums
    (its counts stay in the totals)."""
    mark_process_dead(pid, shared)  # type: ignore[no-untyped-call]


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
    """The registry and its metrics; `flushed` is the writer's observer (`LogObserver`), and
    `claimed` to `engine_failed` the runner's (`WorkObserver`)."""

    def __init__(self) -> None:
        # Set (by `serve --processes`) before prometheus-client was imported: every value
        # below lives in this process's files in that directory.
        self._shared = os.environ.get(_SHARED) or None
        self._probes: tuple[Callable[[], int], ...] = ()
        self._kept: dict[tuple[object, ...], Any] = {}  # `_child`'s series
        # The models a token count is labelled with: a request names any model string (the
        # scripted engine answers to every name), and each would be a series of its own.
        self._models: Callable[[], Sequence[str]] = tuple
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
            multiprocess_mode="livesum",
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
            "resplog_log_queued_events",
            "Events waiting for the log writer.",
            multiprocess_mode="livesum",
            registry=r,
        )
        self._starts: OrderedDict[str, float] = OrderedDict()
        self._work(r)

    def _work(self, r: CollectorRegistry) -> None:
        self.first_event = Histogram(
            "resplog_stream_first_event_seconds",
            "From a streaming request's arrival to its first event sent (SSE).",
            buckets=_SECONDS,
            registry=r,
        )
        self.connections = Gauge(
            "resplog_connections_open",
            "Streaming connections open now, by kind (sse, websocket).",
            ["kind"],
            multiprocess_mode="livesum",
            registry=r,
        )
        self.held = Gauge(
            "resplog_leases_held",
            "Leases held now.",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.tails = Gauge(
            "resplog_live_tails",
            "Tails of the log open now.",
            multiprocess_mode="livesum",
            registry=r,
        )
        self.claimed_total = Counter(
            "resplog_leases_claimed", "Queued responses claimed by this process.", registry=r
        )
        self.lost_total = Counter(
            "resplog_leases_lost",
            "Leases of this process taken over by another (its generation stopped).",
            registry=r,
        )
        self.sweeps = Counter(
            "resplog_sweeper_actions",
            "What the sweeper did with expired leases (ended, cancelled, resumed).",
            ["action"],
            registry=r,
        )
        self.engine_errors = Counter(
            "resplog_engine_errors",
            "Generations ended by an engine error, by its code.",
            ["kind"],
            registry=r,
        )
        self.webhooks = Counter(
            "resplog_webhook_deliveries",
            "Webhook attempts by outcome: delivered, retry (failed, tried again), expired "
            "(failed past --webhook-max-age-h: given up).",
            ["outcome"],
            registry=r,
        )
        self.webhook_oldest = Gauge(
            "resplog_webhook_oldest_pending_seconds",
            "Age of the oldest webhook delivery still pending (to an enabled endpoint).",
            multiprocess_mode="livemax",
            registry=r,
        )
        for outcome in ("delivered", "retry", "expired"):
            self.webhooks.labels(outcome)
        for kind in ("sse", "websocket"):
            self.connections.labels(kind).set(0)
        self.sse = self.connections.labels("sse")  # every stream's, kept (see `_child`)

    def watch(
        self,
        held: Callable[[], int],
        tails: Callable[[], int],
        models: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        """Read the leases held and the live tails at each scrape, and label tokens with
        the models the engine serves (`models`; called on the process's running loop)."""
        if models is not None:
            self._models = models
        if self._shared is None:
            self.held.set_function(held)
            self.tails.set_function(tails)
            return
        # A function's value is only in this process's own registry, and a scrape that
        # another process takes reads the files: write the values there each second (and
        # at each scrape taken here).
        self._probes = (held, tails)
        self._tick(asyncio.get_running_loop())

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self._probe()
        loop.call_later(1.0, self._tick, loop)

    def _probe(self) -> None:
        for gauge, probe in zip((self.held, self.tails), self._probes, strict=False):
            gauge.set(probe())

    def exposition(self) -> bytes:
        """The page: this process's registry, or the files of every process."""
        if self._shared is None:
            return generate_latest(self.registry)
        self._probe()
        merged = CollectorRegistry()  # the collector's own: it must not hold the metrics
        MultiProcessCollector(merged, self._shared)  # type: ignore[no-untyped-call]
        return generate_latest(merged)

    # --- the background work's report (WorkObserver) -----------------------------------------

    def claimed(self, count: int) -> None:
        self.claimed_total.inc(count)

    def lease_lost(self) -> None:
        self.lost_total.inc()

    def swept(self, action: str) -> None:
        self.sweeps.labels(action).inc()

    def webhook_attempted(self, outcome: str) -> None:
        self.webhooks.labels(outcome).inc()

    def webhook_pending(self, oldest_age_s: float) -> None:
        self.webhook_oldest.set(oldest_age_s)

    def engine_failed(self, code: str) -> None:
        # The codes are literals of the engine adapters; anything else is not a label.
        self.engine_errors.labels(code if _CODE.match(code) else "other").inc()

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
        self._child(self.ended, final.status, reason or final.status).inc()
        usage = final.usage or {}
        model = final.model if final.model in self._models() else "other"
        for kind in ("input", "output"):
            count = usage.get(f"{kind}_tokens")
            if isinstance(count, int) and count > 0:
                self._child(self.tokens, model, kind).inc(count)

    def _child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, kept: `labels()` takes a lock and builds its key on
        every call, and a request counts two series, a response's end three. Only for
        labels whose values are bounded (methods, routes, statuses, resplog's reasons, the
        engine's models), as the metric's own series are."""
        key = (metric, *labels)
        child = self._kept.get(key)
        if child is None:
            child = self._kept[key] = metric.labels(*labels)
        return child

    # --- HTTP -----------------------------------------------------------------------------

    def asgi(self, app: Any, access: Access, key: str | None) -> Any:
        """`app` with every request measured and `GET /metrics` answered (per `access`)."""

        async def middleware(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "websocket":
                with self.connections.labels("websocket").track_inprogress():
                    await app(scope, receive, send)
                return
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            if scope["path"] == "/metrics":
                await self._scrape(scope, send, access, key)
                return
            await self._measured(app, scope, receive, send)

        return middleware

    async def _measured(self, app: Any, scope: Any, receive: Any, send: Any) -> None:
        """One HTTP request through `app`, counted; an SSE stream is also an open
        connection, and its first event is timed."""
        exchange = _Exchange(time.perf_counter(), self, scope)
        watch(scope, exchange)
        route = route_of(scope["path"])
        self.in_flight.inc()
        try:
            await app(scope, receive, send)
        finally:
            self.in_flight.dec()
            if exchange.streaming:
                self.sse.dec()
            # Few series: httptools parses only the methods HTTP defines, `route_of` names
            # the API's routes, and a status is one of the few the API answers.
            method = scope["method"]
            status = unanswered(scope) if exchange.status is None else exchange.status
            self._child(self.requests, method, route, str(status)).inc()
            self._child(self.duration, method, route).observe(time.perf_counter() - exchange.began)

    async def _scrape(self, scope: Any, send: Any, access: Access, key: str | None) -> None:
        if access == "off":
            await _answer(send, 404, _NOT_FOUND, "application/json")
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
        await _answer(send, 200, self.exposition(), CONTENT_TYPE_LATEST)

    def scrape_only(self, access: Access, key: str | None) -> Any:
        """An app of `GET /metrics` alone (a `resplog worker`'s metrics port); 404 else."""

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return  # uvicorn runs it with no lifespan and no WebSocket protocol
            if scope["path"] == "/metrics":
                await self._scrape(scope, send, access, key)
            else:
                await _answer(send, 404, _NOT_FOUND, "application/json")

        return app


class _Exchange:
    """What one request's response sent so far (an `edge.Watcher`): its status, whether it
    is an SSE stream, and when its first event went out."""

    def __init__(self, began: float, metrics: Metrics, scope: Any) -> None:
        self.began = began
        self.metrics = metrics
        self.scope = scope
        self.status: int | None = None  # no response begun (yet): see `unanswered`
        self.streaming = False  # an SSE response (counted open until the request ends)

    def sent(self, message: Any) -> bool:
        if message["type"] == "http.response.start":
            self.status = answered(self.scope, message["status"])
            kind = dict(message.get("headers") or []).get(b"content-type", b"")
            if kind.startswith(b"text/event-stream"):
                self.streaming = True
                self.metrics.sse.inc()
            return self.streaming
        if not message.get("body"):
            return True  # the first event is in a later body
        self.metrics.first_event.observe(time.perf_counter() - self.began)
        return False


def _authorised(scope: Any, key: str | None) -> bool:
    given = dict(scope.get("headers") or []).get(b"authorization", b"")
    return bool(key) and hmac.compare_digest(given, f"Bearer {key}".encode())


async def _answer(send: Any, status: int, body: bytes, content_type: str) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
