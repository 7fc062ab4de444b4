"""`GET /metrics` scraped and parsed by prometheus-client's own parser while a real server
takes traffic: the values move with what the test does, labels stay bounded, and the access
modes hold (adapters/metrics/prom.py)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.cluster import start_worker, stop
from tests.e2e.conftest import Server, free_port, start_server, stop_server


def scrape(
    http: httpx.Client, **headers: str
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = http.get("/metrics", headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_move_with_the_traffic(client: openai.OpenAI, http: httpx.Client) -> None:
    before = scrape(http)
    r = client.responses.create(model="scripted", input="count me")
    client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_" + "0" * 32)
    after = scrape(http)
    route = {"method": "POST", "route": "/v1/responses", "status": "200"}
    assert (
        value(after, "resplog_http_requests_total", **route)
        == value(before, "resplog_http_requests_total", **route) + 1
    )
    got = {"method": "GET", "route": "/v1/responses/{id}", "status": "404"}
    assert value(after, "resplog_http_requests_total", **got) >= 1
    done = {"status": "completed", "reason": "completed"}
    assert (
        value(after, "resplog_responses_ended_total", **done)
        == value(before, "resplog_responses_ended_total", **done) + 1
    )
    assert r.usage is not None
    tokens = {"model": "scripted", "kind": "output"}
    assert (
        value(after, "resplog_tokens_total", **tokens)
        - value(before, "resplog_tokens_total", **tokens)
        == r.usage.output_tokens
    )
    assert value(after, "resplog_first_output_seconds_count") > value(
        before, "resplog_first_output_seconds_count"
    )
    assert value(after, "resplog_log_flush_seconds_count") > value(
        before, "resplog_log_flush_seconds_count"
    )
    # No response id ever becomes a label value.
    assert not any(r.id in str(labels) for _, labels in after)


def test_engine_errors_and_streams_move_their_metrics(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    before = scrape(http)
    failed = client.responses.create(
        model="scripted", input="fail me", metadata={"scripted_mode": "fail"}
    )
    assert failed.status == "failed"
    slow = {"scripted_delay_ms": "20", "scripted_tokens": "40"}
    during = {}
    with client.responses.stream(model="scripted", input="stream me", metadata=slow) as stream:
        for event in stream:
            if event.type == "response.output_text.delta" and not during:
                during = scrape(http)  # mid-stream: the generation and its tail are live
    after = scrape(http)
    kind = {"kind": "engine_error"}
    assert (
        value(after, "resplog_engine_errors_total", **kind)
        == value(before, "resplog_engine_errors_total", **kind) + 1
    )
    # The stream was open (and tailing the log) while it was scraped, and is closed after.
    assert value(during, "resplog_connections_open", kind="sse") >= 1
    assert value(during, "resplog_live_tails") >= 1
    assert value(during, "resplog_leases_held") >= 1
    assert value(after, "resplog_connections_open", kind="sse") == 0
    # The generation's task ends a moment after its terminal event is committed, which is
    # when the client may already have read it: the lease it held is let go by then.
    wait(lambda: value(scrape(http), "resplog_leases_held") == 0)
    assert value(after, "resplog_stream_first_event_seconds_count") == (
        value(before, "resplog_stream_first_event_seconds_count") + 1
    )


def test_an_open_websocket_is_counted_until_it_closes(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    with client.responses.connect() as conn:
        conn.response.create(model="scripted", input="over the socket")
        for event in conn:
            if event.type == "response.completed":
                break
        assert value(scrape(http), "resplog_connections_open", kind="websocket") == 1
    wait(lambda: value(scrape(http), "resplog_connections_open", kind="websocket") == 0)


@pytest.fixture(scope="module")
def keyed_metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("metrics")
    url = f"sqlite+aiosqlite:///{tmp / 'm.db'}"
    srv = start_server(
        url, "sqlite", Path(tmp) / "server.log", "--metrics", "key", "--metrics-key", "s3cret"
    )
    yield srv
    stop_server(srv)


def test_a_scrape_key_guards_the_metrics_and_never_shows(keyed_metrics: Server) -> None:
    with httpx.Client(base_url=keyed_metrics.base_url) as http:
        assert http.get("/metrics").status_code == 401
        assert http.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert scrape(http, Authorization="Bearer s3cret")
    assert "s3cret" not in keyed_metrics.log_text()


def test_metrics_off_is_a_404(tmp_path: Path) -> None:
    srv = start_server(
        f"sqlite+aiosqlite:///{tmp_path / 'o.db'}", "sqlite", tmp_path / "log", "--metrics", "off"
    )
    try:
        assert httpx.get(f"{srv.base_url}/metrics").status_code == 404
    finally:
        stop_server(srv)


def test_leases_claimed_lost_and_swept_move_when_a_lease_is_taken_over(
    fresh_pg: Callable[[], str], tmp_path: Path
) -> None:
    """An API-only replica (A) queues a background response; B claims and generates it.
    B then stalls (SIGSTOP: it neither appends, which extends a lease, nor renews) and its
    lease is made to run out: A's sweeper takes the lease over and ends the response, and
    B, woken, finds its next append refused and stops its generation. Each counts its
    part."""
    url = fresh_pg()
    a = start_server(url, "postgres", tmp_path / "a.log", "--workers", "0", "--lease-ttl-s", "1")
    b = start_server(url, "postgres", tmp_path / "b.log", "--workers", "2", "--lease-ttl-s", "30")
    try:
        with httpx.Client(base_url=a.base_url) as on_a, httpx.Client(base_url=b.base_url) as on_b:
            client = openai.OpenAI(base_url=f"{a.base_url}/v1", api_key="unused", max_retries=0)
            slow = {"scripted_delay_ms": "20", "scripted_tokens": "2000"}
            r = client.responses.create(
                model="scripted", input="long", background=True, metadata=slow
            )
            wait(lambda: value(scrape(on_b), "resplog_leases_held") == 1)
            assert value(scrape(on_b), "resplog_leases_claimed_total") == 1
            wait(lambda: bool(client.responses.retrieve(r.id).output_text))
            b.process.send_signal(signal.SIGSTOP)
            try:
                asyncio.run(_expire_lease(url, r.id))
                wait(lambda: client.responses.retrieve(r.id).status == "failed")
                assert value(scrape(on_a), "resplog_sweeper_actions_total", action="ended") == 1
            finally:
                b.process.send_signal(signal.SIGCONT)
            wait(lambda: value(scrape(on_b), "resplog_leases_lost_total") == 1)
            wait(lambda: value(scrape(on_b), "resplog_leases_held") == 0)
            assert value(scrape(on_b), "resplog_sweeper_actions_total", action="ended") == 0
    finally:
        stop_server(b)
        stop_server(a)


def test_a_worker_serves_its_own_metrics_behind_its_key(
    fresh_pg: Callable[[], str], tmp_path: Path
) -> None:
    """An API-only replica queues a background response before any worker runs; a
    `resplog worker` then claims it as it starts and generates it, and its own metrics port
    (key-protected here) counts that claim and the next."""
    url = fresh_pg()
    api = start_server(url, "postgres", tmp_path / "api.log", "--workers", "0")
    client = openai.OpenAI(base_url=f"{api.base_url}/v1", api_key="x", max_retries=0)
    r = client.responses.create(model="scripted", input="queued", background=True)
    assert r.status == "queued"
    port = free_port()
    worker = start_worker(
        url,
        tmp_path / "worker.log",
        *("--scripted-delay-ms", "0", "--metrics-port", str(port)),
        *("--metrics", "key", "--metrics-key", "s3cret"),
    )
    key = {"Authorization": "Bearer s3cret"}
    try:
        wait(lambda: client.responses.retrieve(r.id).status == "completed")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as on_worker:
            assert on_worker.get("/metrics").status_code == 401
            assert on_worker.get("/v1/models", headers=key).status_code == 404
            page = scrape(on_worker, **key)
            assert value(page, "resplog_leases_claimed_total") == 1
            done = {"status": "completed", "reason": "completed"}
            assert value(page, "resplog_responses_ended_total", **done) == 1
            assert value(page, "resplog_leases_held") == 0
            again = client.responses.create(model="scripted", input="more", background=True)
            wait(lambda: client.responses.retrieve(again.id).status == "completed")
            assert value(scrape(on_worker, **key), "resplog_leases_claimed_total") == 2
    finally:
        assert stop(worker.process, worker.log_file) in (0, -signal.SIGTERM)
        stop_server(api)
    assert "s3cret" not in worker.log_text()


async def _expire_lease(url: str, rid: str) -> None:
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute("UPDATE responses SET lease_expires_at = 0 WHERE id = $1", rid)
    finally:
        await conn.close()


def wait(done: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
