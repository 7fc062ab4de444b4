"""Signing as OpenAI's webhooks are signed (Standard Webhooks), so that the official SDKs
verify them: openai-python `src/openai/lib/_webhooks.py` (`webhook_signature_matches`, used
by `client.webhooks.unwrap` in `src/openai/resources/webhooks/webhooks.py`) and openai-node
`src/lib/webhook-signature.ts` (`verifyWebhookSignature`, used by `client.webhooks.unwrap`
in `src/resources/webhooks/webhooks.ts`). Both:

- take the secret `whsec_<base64>` as the base64-decoded bytes after the prefix;
- sign `{webhook-id}.{webhook-timestamp}.{body}` with HMAC-SHA256;
- read `webhook-signature` as space-separated `v1,<base64>` values, any one matching;
- refuse a `webhook-timestamp` more than 300 s (their default tolerance) from their clock,
  so a retry is signed again with the time of its own attempt, under the same webhook-id.

The secrets are sealed for the database as the headers of `mcp` tools are
(service/tools/mcploop.py `ToolLoop.seal`): the server's `Sealer` under `--reasoning-key`,
with a source of their own so that no other sealed blob is taken for one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets

from domain.objects import ReasoningText
from service.reasoning.sealing import Sealer
from service.webhooks.model import Delivery

SECRET_PREFIX = "whsec_"
SEALED_SOURCE = "webhook-secret"


def new_secret() -> str:
    """A signing secret as OpenAI shows them: `whsec_` and base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def seal_secret(sealer: Sealer, secret: str) -> str:
    return sealer.seal([], [ReasoningText(text=secret)], SEALED_SOURCE)


def open_secret(sealer: Sealer, blob: str) -> str | None:
    """The secret in `blob`, or None if it does not open here (another key)."""
    found = sealer.open(blob)
    if found is None or found.source != SEALED_SOURCE or not found.content:
        return None
    return found.content[0].text


def signature(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """One `v1,<base64>` value of the `webhook-signature` header."""
    key = (
        base64.b64decode(secret[len(SECRET_PREFIX) :])
        if secret.startswith(SECRET_PREFIX)
        else secret.encode()
    )
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def body_of(delivery: Delivery) -> bytes:
    """OpenAI's event, the same bytes on every attempt: `{"id": "evt_…", "object": "event",
    "type": "response.completed", "created_at": …, "data": {"id": "resp_…"}}`
    (openai-python src/openai/types/webhooks/response_completed_webhook_event.py)."""
    event = {
        "id": delivery.event_id,
        "object": "event",
        "type": delivery.event_type,
        "created_at": int(delivery.event_at),
        "data": {"id": delivery.response_id},
    }
    return json.dumps(event, separators=(",", ":")).encode()


def headers_of(
    delivery: Delivery, secrets_: list[str], body: bytes, timestamp: int
) -> dict[str, str]:
    """The headers of one attempt: signed by every secret given (the current one, and the
    previous one during a rotation's grace period)."""
    wid = delivery.webhook_id
    return {
        "content-type": "application/json",
        "user-agent": "resplog-webhooks",
        "webhook-id": wid,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(s, wid, timestamp, body) for s in secrets_),
    }
