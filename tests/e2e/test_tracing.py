"""OpenTelemetry tracing end to end (adapters/otel): a real server exports over OTLP/HTTP to
a receiver here, which decodes each export with opentelemetry-proto; the span tree of a
create (HTTP request -> generation -> first commit, terminal), its attributes and its
status on failure are checked, and an unconfigured process never imports opentelemetry."""

from __future__ import annotations

import gzip
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from adapters.cli.tracing import open_tracer
from domain.errors import ResplogError
from service.settings import Settings
from tests.e2e.cluster import start_worker, stop
from tests.e2e.conftest import Server, start_server, stop_server

PROMPT = "a prompt that must never reach a trace"


@dataclass
class Receiver:
    """An OTLP/HTTP trace endpoint: every span exported to it, and the raw bodies."""

    url: str = ""
    spans: list[Span] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def generation(self, rid: str, timeout: float = 15) -> list[Span]:
        """The generation span of `rid` (waiting for its export), checked to be one."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                found = [
                    s
                    for s in self.spans
                    if s.name == "chat scripted" and attrs(s).get("gen_ai.response.id") == rid
                ]
            if found or time.monotonic() > deadline:
                assert len(found) == 1
                return found
            time.sleep(0.05)


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            ok = self.path == "/v1/traces"
            if ok:
                export = ExportTraceServiceRequest.FromString(body)
                with receiver.lock:
                    receiver.bodies.append(body)
                    for resource in export.resource_spans:
                        for scope in resource.scope_spans:
                            receiver.spans.extend(scope.spans)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(found))
    found.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield found
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def traced(receiver: Receiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    tmp = tmp_path_factory.mktemp("traced")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # export within the test's patience
        srv: Server = start_server(
            f"sqlite+aiosqlite:///{tmp / 't.db'}",
            "sqlite",
            tmp / "server.log",
            "--otel-endpoint",
            receiver.url,
        )
    try:
        yield openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="unused", max_retries=0)
    finally:
        stop_server(srv)


def attrs(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        value = getattr(kv.value, kind)
        out[kv.key] = list(v.string_value for v in value.values) if kind == "array_value" else value
    return out


def tree(receiver: Receiver, rid: str) -> tuple[Span, Span, Span, Span]:
    """The HTTP span, the generation span of `rid`, and its first commit and terminal (the
    request's span ends last, so it may come in a later export: it is waited for)."""
    (gen,) = receiver.generation(rid)
    deadline = time.monotonic() + 15
    while True:
        with receiver.lock:
            same = [s for s in receiver.spans if s.trace_id == gen.trace_id]
        if len(same) >= 4 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    (http,) = [s for s in same if s.span_id == gen.parent_span_id]
    (first,) = [s for s in same if s.name == "resplog.first_commit"]
    (terminal,) = [s for s in same if s.name == "resplog.terminal"]
    assert len(same) == 4
    return http, gen, first, terminal


def test_a_create_is_one_trace_request_generation_first_commit_terminal(
    traced: openai.OpenAI, receiver: Receiver
) -> None:
    r = traced.responses.create(model="scripted", input=PROMPT)
    assert r.status == "completed"
    http, gen, first, terminal = tree(receiver, r.id)
    assert http.name == "POST /v1/responses"
    assert http.kind == Span.SPAN_KIND_SERVER
    assert http.parent_span_id == b""  # the root: no trace came with the request
    assert attrs(http) == {
        "http.request.method": "POST",
        "http.route": "/v1/responses",
        "http.response.status_code": 200,
    }
    assert gen.kind == Span.SPAN_KIND_CLIENT
    g = attrs(gen)
    assert g["gen_ai.operation.name"] == "chat"
    assert g["gen_ai.request.model"] == "scripted"
    assert r.usage is not None
    assert g["gen_ai.usage.output_tokens"] == r.usage.output_tokens
    assert g["gen_ai.response.finish_reasons"] == ["completed"]
    assert gen.status.code == Status.STATUS_CODE_UNSET
    assert first.parent_span_id == gen.span_id == terminal.parent_span_id
    # In order: the request holds the generation, whose first commit ends before the
    # terminal append begins, which ends before the generation does.
    assert http.start_time_unix_nano <= gen.start_time_unix_nano
    assert first.start_time_unix_nano == gen.start_time_unix_nano
    assert first.end_time_unix_nano <= terminal.start_time_unix_nano
    assert terminal.end_time_unix_nano <= gen.end_time_unix_nano <= http.end_time_unix_nano
    assert attrs(terminal)["resplog.response.status"] == "completed"
    with receiver.lock:
        assert not any(PROMPT.encode() in body for body in receiver.bodies)
        assert not any(b"You said" in body for body in receiver.bodies)  # nor the output


def test_a_failed_generation_marks_its_spans_as_errors(
    traced: openai.OpenAI, receiver: Receiver
) -> None:
    r = traced.responses.create(model="scripted", input="fail", metadata={"scripted_mode": "fail"})
    assert r.status == "failed"
    http, gen, _, terminal = tree(receiver, r.id)
    assert gen.status.code == Status.STATUS_CODE_ERROR
    assert attrs(gen)["error.type"] == "engine_error"
    assert terminal.status.code == Status.STATUS_CODE_ERROR
    assert attrs(terminal)["resplog.end_reason"] == "engine_error"
    # The request itself was answered (200 with a failed response): not a server error.
    assert http.status.code == Status.STATUS_CODE_UNSET


def test_a_client_that_left_before_an_answer_is_499_not_a_server_error(
    traced: openai.OpenAI, receiver: Receiver
) -> None:
    """A create whose client closed the connection mid-body got no answer: its span says
    499 (adapters/http/watch.py `unanswered`), and it is not marked as the server's error."""
    with socket.create_connection((traced.base_url.host, traced.base_url.port)) as conn:
        conn.sendall(
            b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n" + b'{"model":"scripted","input":"'
        )
        time.sleep(0.2)
    deadline = time.monotonic() + 15
    while True:
        with receiver.lock:
            left = [
                s
                for s in receiver.spans
                if s.name == "POST /v1/responses"
                and attrs(s).get("http.response.status_code") == 499
            ]
        if left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    (span,) = left
    assert span.status.code == Status.STATUS_CODE_UNSET and "error.type" not in attrs(span)


def test_a_clients_traceparent_makes_the_request_its_child(
    traced: openai.OpenAI, receiver: Receiver
) -> None:
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    r = traced.responses.create(
        model="scripted",
        input="continued trace",
        extra_headers={"traceparent": f"00-{trace_id}-{parent}-01"},
    )
    http, gen, _, _ = tree(receiver, r.id)
    assert http.trace_id.hex() == trace_id == gen.trace_id.hex()
    assert http.parent_span_id.hex() == parent


def test_a_streamed_create_is_traced_too(traced: openai.OpenAI, receiver: Receiver) -> None:
    with traced.responses.stream(model="scripted", input="stream") as stream:
        final = stream.get_final_response()
    http, gen, _, _ = tree(receiver, final.id)
    assert http.name == "POST /v1/responses"
    assert attrs(gen)["gen_ai.response.finish_reasons"] == ["completed"]


def test_a_worker_traces_the_background_response_it_claimed(
    receiver: Receiver, tmp_path: Path
) -> None:
    """A `resplog worker` with tracing on: the response an untraced API replica queued is
    generated there, under a root span of the worker's own."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'w.db'}"
    api = start_server(url, "sqlite", tmp_path / "api.log", "--workers", "0")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        worker = start_worker(url, tmp_path / "worker.log", "--otel-endpoint", receiver.url)
    try:
        client = openai.OpenAI(base_url=f"{api.base_url}/v1", api_key="unused", max_retries=0)
        r = client.responses.create(model="scripted", input="queued", background=True)
        deadline = time.monotonic() + 30
        while client.responses.retrieve(r.id).status != "completed":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        gen = receiver.generation(r.id)
        assert gen[0].parent_span_id == b""  # the request was another process's
        with receiver.lock:
            children = {s.name for s in receiver.spans if s.parent_span_id == gen[0].span_id}
        assert children == {"resplog.first_commit", "resplog.terminal"}
    finally:
        stop(worker.process, worker.log_file)
        stop_server(api)


def test_a_bad_endpoint_or_a_missing_extra_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ResplogError, match="http:// or https://") as bad:
        open_tracer(Settings(otel_endpoint="collector:4318"))
    assert "collector" not in str(bad.value)
    monkeypatch.setitem(sys.modules, "adapters.otel", None)  # the extra is not installed
    with pytest.raises(ResplogError, match=r"pip install 'resplog\[otel\]'"):
        open_tracer(Settings(otel_endpoint="http://collector:4318"))


def test_without_tracing_configured_opentelemetry_is_never_imported(tmp_path: Path) -> None:
    """The serving stack is built as `serve` builds it, with no endpoint and no OTEL_
    variable: neither adapters/otel nor the SDK or its exporter is loaded (the `otel` extra
    may not be installed). The `mcp` package, a dependency of the core, imports
    opentelemetry's API itself: that is its own, a no-op without an SDK."""
    probe = (
        "import asyncio, sys\n"
        "from adapters.cli.server import _app\n"
        "from adapters.cli.tracing import open_tracer, watching\n"
        "from adapters.metrics import Metrics\n"
        "from adapters.wiring import running_process\n"
        "from service.settings import Settings\n"
        f"s = Settings(database_url='sqlite+aiosqlite:///{tmp_path / 'p.db'}')\n"
        "assert open_tracer(s) is None\n"
        "async def main():\n"
        "    t, m = open_tracer(s), Metrics()\n"
        "    async with running_process(s, attach=watching(t, m)) as p:\n"
        "        await _app(s, p, t, m)\n"
        "asyncio.run(main())\n"
        "heavy = ('adapters.otel', 'opentelemetry.sdk', 'opentelemetry.exporter')\n"
        "print('loaded:', sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    subprocess.run(
        [
            str(Path(sys.executable).with_name("resplog")),
            "migrate",
            "--database-url",
            f"sqlite+aiosqlite:///{tmp_path / 'p.db'}",
        ],
        check=True,
        capture_output=True,
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip().splitlines()[-1] == "loaded: []"
