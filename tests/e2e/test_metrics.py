"""`GET /metrics` scraped and parsed by prometheus-client's own parser while a real server
takes traffic: the values move with what the test does, labels stay bounded, and the access
modes hold (adapters/metrics/prom.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import Server, start_server, stop_server


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
