"""Webhook signing against the SDK's own check (openai-python `src/openai/lib/_webhooks.py`
`webhook_signature_matches`, which `client.webhooks.unwrap` calls), the event's bytes, the
backoff's bounds, and what `webhooks add` refuses."""

from __future__ import annotations

import json
import time

import openai
import pytest
from openai.lib._webhooks import webhook_signature_matches

from domain.errors import InvalidRequest
from service.webhooks.delivery import MAX_DELAY_S, backoff
from service.webhooks.manage import check_events, check_url
from service.webhooks.model import Delivery
from service.webhooks.signing import body_of, headers_of, new_secret, signature

DELIVERY = Delivery(
    endpoint_id="whep_1",
    response_id="resp_1",
    owner="acme",
    event_type="response.completed",
    event_at=1796670553.7,
    status="pending",
    attempts=1,
    next_attempt_at=0.0,
)


def test_the_sdk_verifies_what_is_signed_and_nothing_else() -> None:
    secret, other = new_secret(), new_secret()
    body = body_of(DELIVERY)
    now = int(time.time())
    headers = headers_of(DELIVERY, [secret], body, now)
    assert webhook_signature_matches(body, headers, secret=secret, tolerance=300)
    assert not webhook_signature_matches(body, headers, secret=other, tolerance=300)
    assert not webhook_signature_matches(body + b" ", headers, secret=secret, tolerance=300)
    moved = {**headers, "webhook-id": "wh_other"}
    assert not webhook_signature_matches(body, moved, secret=secret, tolerance=300)
    # Two secrets (a rotation's grace period): either one verifies.
    both = headers_of(DELIVERY, [other, secret], body, now)
    assert both["webhook-signature"].count("v1,") == 2
    assert webhook_signature_matches(body, both, secret=secret, tolerance=300)
    assert webhook_signature_matches(body, both, secret=other, tolerance=300)
    # A timestamp the SDK finds too old: each attempt is signed at its own time.
    old = headers_of(DELIVERY, [secret], body, now - 301)
    with pytest.raises(openai.InvalidWebhookSignatureError):
        webhook_signature_matches(body, old, secret=secret, tolerance=300)


def test_the_event_is_openais_and_the_same_bytes_on_every_attempt() -> None:
    body = body_of(DELIVERY)
    assert body == body_of(DELIVERY)
    assert json.loads(body) == {
        "id": DELIVERY.event_id,
        "object": "event",
        "type": "response.completed",
        "created_at": 1796670553,
        "data": {"id": "resp_1"},
    }
    secret = new_secret()
    headers = headers_of(DELIVERY, [secret], body, int(time.time()))
    event = openai.OpenAI(api_key="x", webhook_secret=secret).webhooks.unwrap(body, headers)
    assert type(event).__name__ == "ResponseCompletedWebhookEvent"
    assert event.data.id == "resp_1"
    # The webhook-id and event id are derived: the same in any process, on any attempt.
    assert DELIVERY.webhook_id == Delivery(**{**_fields(), "attempts": 7}).webhook_id
    assert DELIVERY.webhook_id.startswith("wh_") and DELIVERY.event_id.startswith("evt_")


def _fields() -> dict[str, object]:
    return {name: getattr(DELIVERY, name) for name in Delivery.__struct_fields__}


def test_a_secret_without_the_prefix_is_its_own_bytes() -> None:
    """As the SDKs take one (`secret.encode()` when it lacks `whsec_`)."""
    body = body_of(DELIVERY)
    sig = signature("plain", "wh_1", 10, body)
    headers = {"webhook-id": "wh_1", "webhook-timestamp": "10", "webhook-signature": sig}
    assert webhook_signature_matches(body, headers, secret="plain", tolerance=10**10)


def test_backoff_doubles_with_jitter_in_its_upper_half_and_is_capped() -> None:
    assert backoff(1, 5.0, rand=lambda: 0.0) == 2.5
    assert backoff(1, 5.0, rand=lambda: 1.0) == 5.0
    assert backoff(3, 5.0, rand=lambda: 1.0) == 20.0
    assert backoff(40, 5.0, rand=lambda: 1.0) == MAX_DELAY_S
    waits = [backoff(2, 5.0) for _ in range(200)]
    assert min(waits) >= 5.0 and max(waits) <= 10.0 and len(set(waits)) > 100


@pytest.mark.parametrize(
    "url",
    [
        "ftp://x.example/",
        "x.example/hook",
        "http://",
        "https://u:p@x.example/",
        "https://x.example/#f",
        "https://x.example:0/",
        "https://x.example:99999/",
        "https://x.example/a b",
    ],
)
def test_a_bad_url_is_refused(url: str) -> None:
    with pytest.raises(InvalidRequest):
        check_url(url)


def test_a_good_url_and_the_event_types() -> None:
    assert check_url("https://x.example:8443/hook?k=v") == "https://x.example:8443/hook?k=v"
    assert check_events(["response.completed", " response.failed", "response.completed"]) == (
        "response.completed",
        "response.failed",
    )
    with pytest.raises(InvalidRequest, match=r"unknown event type 'batch\.completed'"):
        check_events(["batch.completed"])
    with pytest.raises(InvalidRequest, match="at least one"):
        check_events(["", " "])
