"""Webhooks end to end: a real `resplog serve`, the official openai SDK creating background
responses, receivers (real HTTP servers) whose every delivery openai-python's
`client.webhooks.unwrap` verifies, and `resplog webhooks` as an operator runs it. The Node
SDK's verification is tests/clients/test_webhooks_node.py.

One server on SQLite serves every test but the takeover (each test acts as an owner of its
own, with an API key, so that its endpoints hear only its responses); the takeover after
`kill -9` runs two processes on PostgreSQL. Retries are fast (`--webhook-backoff-s 0.1`),
a delivery expires 4 s after its event and an endpoint failing for 5 s is disabled.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import Server, free_port, start_server, stop_server
from tests.e2e.webhooks_kit import (
    FAST,
    Received,
    Receiver,
    add_direct,
    add_endpoint,
    api_key,
    attempts_recorded,
    deliveries,
    endpoint_status,
    first,
    status,
    wait_for,
    webhooks,
)
from tests.e2e.webhooks_kit import (
    set_status as set_endpoint,
)

SLOW = {"scripted_delay_ms": "25", "scripted_tokens": "400"}
MAX_AGE_S = 4.0
DISABLE_AFTER_S = 5.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("webhooks")
    url = f"sqlite+aiosqlite:///{tmp / 'resplog.db'}"
    extra = (
        *("--auth", "keys", "--metrics", "open", "--audit-view", "open"),
        *("--webhook-max-age-h", str(MAX_AGE_S / 3600)),
        *("--webhook-disable-after-h", str(DISABLE_AFTER_S / 3600)),
    )
    server = start_server(url, "sqlite", tmp / "server.log", *FAST, *extra)
    yield server
    stop_server(server)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


_owners = itertools.count()


def owner_client(server: Server) -> tuple[str, openai.OpenAI]:
    """A fresh owner of the server and a client acting for it."""
    owner = f"owner{next(_owners)}-{os.getpid()}"
    key = api_key(server.database_url, owner)
    return owner, openai.OpenAI(base_url=server.base_url + "/v1", api_key=key)


def unwrap(client: openai.OpenAI, got: Received, secret: str) -> Any:
    return client.webhooks.unwrap(got.body, got.headers, secret=secret)


def test_each_delivery_verifies_with_openai_python(served: Server, receiver: Receiver) -> None:
    owner, client = owner_client(served)
    every = "response.completed,response.failed,response.cancelled,response.incomplete"
    _, secret = add_endpoint(served.database_url, receiver.url, every, owner=owner)  # the CLI
    done = client.responses.create(model="scripted", input="hi", background=True)
    short = client.responses.create(
        model="scripted",
        input="hi",
        background=True,
        max_output_tokens=16,
        metadata={"scripted_tokens": "40"},
    )
    slow = client.responses.create(model="scripted", input="hi", background=True, metadata=SLOW)
    client.responses.cancel(slow.id)
    client.responses.create(model="scripted", input="not background")  # no webhook
    got = receiver.wait(3)
    events = {}
    for r in got:
        event = unwrap(client, r, secret)
        events[event.data.id] = event
        assert r.headers["webhook-id"].startswith("wh_")
        assert event.id.startswith("evt_") and event.object == "event"
    assert {k: e.type for k, e in events.items()} == {
        done.id: "response.completed",
        short.id: "response.incomplete",
        slow.id: "response.cancelled",
    }
    assert type(events[done.id]).__name__ == "ResponseCompletedWebhookEvent"
    # A wrong secret, or a changed body, does not verify.
    with pytest.raises(openai.InvalidWebhookSignatureError):
        unwrap(client, got[0], "whsec_" + "A" * 43 + "=")
    with pytest.raises(openai.InvalidWebhookSignatureError):
        client.webhooks.unwrap(got[0].body + b" ", got[0].headers, secret=secret)
    time.sleep(0.3)
    assert len(receiver.got) == 3  # each once; the foreground response has none
    assert secret not in served.log_text()


def test_receiver_down_then_up_gets_it_with_the_same_webhook_id(served: Server) -> None:
    owner, client = owner_client(served)
    port = free_port()
    endpoint_id, secret = add_direct(
        served.database_url, f"http://127.0.0.1:{port}/hook", owner=owner
    )
    answers = iter([500, 503])
    receiver = Receiver(answer=lambda _: next(answers, 200), port=port)
    r = client.responses.create(model="scripted", input="hi", background=True)
    # Nothing listens: connection refused, then backoff.
    wait_for(lambda: any(n >= 2 for _, n in status(served.database_url, endpoint_id)))
    receiver.start()
    try:
        got = receiver.wait(3)
        ids = {g.headers["webhook-id"] for g in got}
        assert len(ids) == 1
        for g in got:
            assert unwrap(client, g, secret).data.id == r.id
        wait_for(lambda: first(served.database_url, endpoint_id) == "delivered")
    finally:
        receiver.stop()
    record = deliveries(served.database_url, endpoint_id)[0]  # the CLI's JSON
    outcomes = [a["outcome"] for a in record["attempts"]]
    assert outcomes[-3:] == ["retry", "retry", "delivered"] and set(outcomes[:-3]) <= {"retry"}
    assert record["webhook_id"] == ids.pop()
    assert [a["status_code"] for a in record["attempts"]][-3:] == [500, 503, 200]
    assert record["attempts"][0]["status_code"] is None  # refused: no answer
    assert "Connect" in record["attempts"][0]["error"]
    for a in record["attempts"]:
        assert a["latency_s"] >= 0 and a["worker"] and a["started_at"] > 0
    # Shown by the CLI's table, the audit view beside the response, and the metrics.
    table = webhooks("deliveries", endpoint_id, url=served.database_url)
    assert table.returncode == 0, table.stderr
    assert "HTTP 500" in table.stdout and "delivered" in table.stdout
    view = httpx.get(f"{served.base_url}/audit/api/responses/{r.id}").json()
    assert [a["outcome"] for a in view["webhooks"][0]["attempts"]] == outcomes
    metrics = httpx.get(f"{served.base_url}/metrics").text
    assert 'resplog_webhook_deliveries_total{outcome="delivered"}' in metrics
    assert 'resplog_webhook_deliveries_total{outcome="retry"}' in metrics
    assert "resplog_webhook_oldest_pending_seconds" in metrics


def test_rotated_secret_signs_with_both_during_grace(served: Server, receiver: Receiver) -> None:
    owner, client = owner_client(served)
    endpoint_id, old = add_direct(served.database_url, receiver.url, owner=owner)
    rotated = webhooks("rotate-secret", endpoint_id, url=served.database_url)
    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.strip().splitlines()[-1]
    assert new.startswith("whsec_") and new != old
    client.responses.create(model="scripted", input="hi", background=True)
    got = receiver.wait(1)[0]
    assert len(got.headers["webhook-signature"].split()) == 2
    unwrap(client, got, new)
    unwrap(client, got, old)  # the old secret still verifies in its grace period
    # With no grace, the old one no longer signs.
    rotated = webhooks("rotate-secret", endpoint_id, "--grace-h", "0", url=served.database_url)
    newest = rotated.stdout.strip().splitlines()[-1]
    client.responses.create(model="scripted", input="hi", background=True)
    got = receiver.wait(2)[1]
    assert len(got.headers["webhook-signature"].split()) == 1
    unwrap(client, got, newest)
    with pytest.raises(openai.InvalidWebhookSignatureError):
        unwrap(client, got, new)
    for secret in (old, new, newest):
        assert secret not in served.log_text()


def test_an_owner_hears_only_its_own_responses(served: Server) -> None:
    first_receiver, second_receiver = Receiver().start(), Receiver().start()
    try:
        a, client_a = owner_client(served)
        b, client_b = owner_client(served)
        _, secret_a = add_direct(served.database_url, first_receiver.url, owner=a)
        _, secret_b = add_direct(served.database_url, second_receiver.url, owner=b)
        ra = client_a.responses.create(model="scripted", input="a", background=True)
        rb = client_b.responses.create(model="scripted", input="b", background=True)
        assert unwrap(client_a, first_receiver.wait(1)[0], secret_a).data.id == ra.id
        assert unwrap(client_b, second_receiver.wait(1)[0], secret_b).data.id == rb.id
        time.sleep(0.3)
        assert len(first_receiver.got) == 1 and len(second_receiver.got) == 1
        mine = webhooks("list", "--owner", a, "--json", url=served.database_url).stdout
        assert [e["endpoint"]["owner"] for e in json.loads(mine)] == [a]
    finally:
        first_receiver.stop()
        second_receiver.stop()


def test_failing_endpoint_is_disabled_with_a_reason_and_enabled_again(served: Server) -> None:
    owner, client = owner_client(served)
    failing = True
    receiver = Receiver(answer=lambda _: 500 if failing else 200).start()
    url = served.database_url
    try:
        endpoint_id, secret = add_direct(url, receiver.url, owner=owner)
        made = []
        # A delivery expires after 4 s: new ones keep the endpoint failing for 5 s.
        deadline = time.monotonic() + 20
        while endpoint_status(url, endpoint_id) != "disabled":
            assert time.monotonic() < deadline
            made.append(client.responses.create(model="scripted", input="hi", background=True))
            time.sleep(0.5)
        listed = webhooks("list", "--owner", owner, url=url).stdout
        assert "disabled: every attempt failed since" in listed, listed
        record = json.loads(webhooks("list", "--owner", owner, "--json", url=url).stdout)
        assert [c["action"] for c in record[0]["record"]] == ["added", "disabled"]
        assert "--webhook-disable-after-h" in record[0]["record"][1]["detail"]
        count = len(receiver.got)
        late = client.responses.create(model="scripted", input="hi", background=True)
        time.sleep(0.5)
        assert len(receiver.got) == count  # nothing is sent to a disabled endpoint
        failing = False
        set_endpoint(url, endpoint_id, "enabled")
        # What waited within its max age is delivered once enabled.
        wait_for(lambda: any(unwrap(client, g, secret).data.id == late.id for g in receiver.got))
        # Disabled by hand (the CLI): held until enabled again.
        assert webhooks("disable", endpoint_id, url=url).returncode == 0
        held = client.responses.create(model="scripted", input="hi", background=True)
        time.sleep(0.5)
        assert all(unwrap(client, g, secret).data.id != held.id for g in receiver.got)
        set_endpoint(url, endpoint_id, "enabled")
        wait_for(lambda: any(unwrap(client, g, secret).data.id == held.id for g in receiver.got))
        enabled = webhooks("enable", endpoint_id, url=url)  # the CLI's, once
        assert (
            enabled.returncode == 0 and f"enabled webhook endpoint {endpoint_id}" in enabled.stdout
        )
        # Removed: nothing more, gone from the list, not to be enabled.
        assert webhooks("remove", endpoint_id, url=url).returncode == 0
        assert endpoint_id not in webhooks("list", url=url).stdout
        gone = webhooks("enable", endpoint_id, url=url)
        assert gone.returncode == 1 and "no webhook endpoint" in gone.stderr
    finally:
        receiver.stop()


def test_a_delivery_failing_past_its_max_age_expires(served: Server) -> None:
    owner, client = owner_client(served)
    receiver = Receiver(answer=lambda _: 500).start()
    try:
        endpoint_id, _ = add_direct(served.database_url, receiver.url, owner=owner)
        client.responses.create(model="scripted", input="hi", background=True)
        wait_for(lambda: first(served.database_url, endpoint_id) == "expired")
        attempts = deliveries(served.database_url, endpoint_id)[0]["attempts"]
        assert attempts[-1]["outcome"] == "expired" and len(attempts) >= 2
        count = len(receiver.got)
        time.sleep(0.3)
        assert len(receiver.got) == count
    finally:
        receiver.stop()


def test_refused_host_is_a_failed_attempt(served: Server) -> None:
    """The server may reach 127.0.0.1 only (`--webhook-hosts 127.0.0.1/32`)."""
    owner, client = owner_client(served)
    elsewhere = Receiver(host="127.0.0.2").start()
    try:
        endpoint_id, _ = add_direct(served.database_url, elsewhere.url, owner=owner)
        client.responses.create(model="scripted", input="hi", background=True)
        wait_for(lambda: attempts_recorded(served.database_url, endpoint_id) >= 1)
        error = deliveries(served.database_url, endpoint_id)[0]["attempts"][0]["error"]
        assert "--webhook-hosts" in error and "127.0.0.2" in error
        assert elsewhere.got == []
    finally:
        elsewhere.stop()


def test_a_redirect_is_not_followed(served: Server) -> None:
    owner, client = owner_client(served)
    target = Receiver().start()
    mover = Receiver(answer=lambda _: 307).start()
    try:
        endpoint_id, _ = add_direct(served.database_url, mover.url, owner=owner)
        client.responses.create(model="scripted", input="hi", background=True)
        wait_for(lambda: attempts_recorded(served.database_url, endpoint_id) >= 1)
        attempts = deliveries(served.database_url, endpoint_id)[0]["attempts"]
        assert "redirect: not followed" in attempts[0]["error"]
        assert target.got == []
    finally:
        target.stop()
        mover.stop()


BAD_ADDS = [
    (("ftp://example.com/hook", "--events", "response.completed"), "is not an http"),
    (("not a url", "--events", "response.completed"), "is not an http"),
    (("https://user:pw@example.com/", "--events", "response.completed"), "credentials"),
    (("https://example.com/hook", "--events", "response.done"), "unknown event type"),
    (("https://example.com/hook", "--events", ","), "at least one event type"),
]


def test_add_refuses_a_bad_url_or_an_unknown_event_type(served: Server) -> None:
    owner = f"refused-{os.getpid()}"
    for args, words in BAD_ADDS:
        done = webhooks("add", *args, "--owner", owner, url=served.database_url)
        assert done.returncode == 1, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], lines
    listed = webhooks("list", "--owner", owner, "--json", url=served.database_url)
    assert listed.stdout.strip() == "[]"  # nothing half-written


def test_add_needs_the_servers_key(served: Server) -> None:
    done = webhooks(
        "add",
        "https://example.com/",
        "--events",
        "response.completed",
        url=served.database_url,
        key=False,
    )
    assert done.returncode == 1 and "--reasoning-key" in done.stderr


def test_kill_9_mid_attempt_is_delivered_after_takeover_with_the_same_webhook_id(
    fresh_pg: Any, tmp_path: Path
) -> None:
    url = fresh_pg()
    holding = Receiver(answer=lambda r: None if len(holding.got) == 1 else 200).start()
    # A lease lapses 0.5 s after its attempt's 2 s timeout would have ended.
    flags = (*FAST, "--webhook-timeout-s", "2", "--lease-ttl-s", "0.5")
    dead = start_server(url, "postgres", tmp_path / "first.log", *flags)
    second: Server | None = None
    try:
        endpoint_id, secret = add_direct(url, holding.url)
        client = openai.OpenAI(base_url=dead.base_url + "/v1", api_key="x")
        r = client.responses.create(model="scripted", input="hi", background=True)
        holding.wait(1)  # the first process is mid-attempt: the receiver holds it
        dead.process.send_signal(signal.SIGKILL)
        dead.process.wait()
        second = start_server(url, "postgres", tmp_path / "second.log", *flags)
        got = holding.wait(2, timeout=30)
        assert got[0].headers["webhook-id"] == got[1].headers["webhook-id"]
        assert client.webhooks.unwrap(got[1].body, got[1].headers, secret=secret).data.id == r.id
        wait_for(lambda: first(url, endpoint_id) == "delivered")
        attempts = deliveries(url, endpoint_id)[0]["attempts"]
        assert [a["outcome"] for a in attempts] == ["abandoned", "delivered"]
        assert attempts[0]["worker"] != attempts[1]["worker"]
        time.sleep(0.3)
        assert len(holding.got) == 2
    finally:
        holding.stop()
        dead.log_file.close()
        if second is not None:
            stop_server(second)
