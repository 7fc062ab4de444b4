"""The operator's use-cases of `resplog webhooks …`: add an endpoint (its secret shown
once), list, disable, enable, rotate the secret, remove; and the deliveries with their
attempts (also the audit view's, beside a response)."""

from __future__ import annotations

import re
import time
from urllib.parse import urlsplit

import msgspec

from domain.errors import InvalidRequest, NotFound
from service.ids import new_id
from service.reasoning.sealing import Sealer
from service.webhooks.model import (
    EVENT_TYPES,
    Attempt,
    Delivery,
    Endpoint,
    EndpointChange,
    EndpointStatus,
    WebhookStore,
)
from service.webhooks.signing import new_secret, seal_secret

_OWNER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:+-]{0,127}")
_URL_MAX = 2048


class NewEndpoint(msgspec.Struct, frozen=True):
    """An endpoint just added (or whose secret was just rotated), with its secret: the only
    time the secret is shown."""

    endpoint: Endpoint
    secret: str


class DeliveryRecord(msgspec.Struct, frozen=True):
    """A delivery with its webhook-id and every attempt."""

    delivery: Delivery
    webhook_id: str
    attempts: list[Attempt]


def check_url(url: str) -> str:
    """An endpoint's URL: absolute http(s), a host, no credentials, no fragment."""
    if len(url) > _URL_MAX:
        raise InvalidRequest(f"the URL is longer than {_URL_MAX} characters", param="url")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidRequest(f"{url!r} is not a URL ({exc})", param="url") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest(f"{url!r} is not an http:// or https:// URL with a host", param="url")
    if parts.username is not None or parts.password is not None:
        raise InvalidRequest("the URL must not carry credentials", param="url")
    if parts.fragment:
        raise InvalidRequest("the URL must not have a #fragment", param="url")
    if port == 0:
        raise InvalidRequest(f"{url!r} names port 0", param="url")
    if any(c.isspace() for c in url):
        raise InvalidRequest("the URL must not contain spaces", param="url")
    return url


def check_events(events: list[str]) -> tuple[str, ...]:
    """The event types asked for: each one of OpenAI's `response.*` types, at least one."""
    asked = tuple(dict.fromkeys(e.strip() for e in events if e.strip()))
    if not asked:
        raise InvalidRequest(
            f"give at least one event type: {', '.join(EVENT_TYPES)}", param="events"
        )
    unknown = [e for e in asked if e not in EVENT_TYPES]
    if unknown:
        raise InvalidRequest(
            f"unknown event type {unknown[0]!r}; the types are {', '.join(EVENT_TYPES)}",
            param="events",
        )
    return asked


async def add_endpoint(
    store: WebhookStore, sealer: Sealer, url: str, events: list[str], owner: str, *, now: float
) -> NewEndpoint:
    if not _OWNER.fullmatch(owner):
        raise InvalidRequest(f"{owner!r} is not an owner name", param="owner")
    endpoint = Endpoint(
        id=new_id("whep", now),
        owner=owner,
        url=check_url(url),
        events=check_events(events),
        status="enabled",
        created_at=now,
        updated_at=now,
    )
    secret = new_secret()
    await store.add_endpoint(endpoint, seal_secret(sealer, secret))
    return NewEndpoint(endpoint, secret)


async def list_endpoints(
    store: WebhookStore, owner: str | None, *, removed: bool = False
) -> list[Endpoint]:
    found = await store.endpoints(owner)
    return [e for e in found if removed or e.status != "removed"]


class EndpointRecord(msgspec.Struct, frozen=True):
    """An endpoint with its record: every change, in order."""

    endpoint: Endpoint
    record: list[EndpointChange]


async def endpoint_records(
    store: WebhookStore, owner: str | None, removed: bool = False
) -> list[EndpointRecord]:
    found = await list_endpoints(store, owner, removed=removed)
    return [EndpointRecord(e, await store.changes(e.id)) for e in found]


async def _known(store: WebhookStore, endpoint_id: str) -> Endpoint:
    found = await store.endpoint(endpoint_id)
    if found is None or found.status == "removed":
        raise NotFound(f"no webhook endpoint {endpoint_id!r}", param="id")
    return found


async def set_status(
    store: WebhookStore,
    endpoint_id: str,
    status: EndpointStatus,
    reason: str | None = None,
    *,
    now: float | None = None,
) -> Endpoint:
    await _known(store, endpoint_id)
    changed = await store.set_status(endpoint_id, status, reason, now or time.time())
    if changed is None:
        raise NotFound(f"no webhook endpoint {endpoint_id!r}", param="id")
    return changed


async def rotate_secret(
    store: WebhookStore, sealer: Sealer, endpoint_id: str, *, grace_s: float, now: float
) -> NewEndpoint:
    await _known(store, endpoint_id)
    secret = new_secret()
    changed = await store.rotate(endpoint_id, seal_secret(sealer, secret), now + grace_s, now)
    if changed is None:
        raise NotFound(f"no webhook endpoint {endpoint_id!r}", param="id")
    return NewEndpoint(changed, secret)


async def delivery_records(
    store: WebhookStore,
    *,
    endpoint_id: str | None = None,
    response_id: str | None = None,
    owner: str | None = None,
    limit: int = 100,
) -> list[DeliveryRecord]:
    """Deliveries (newest first) with every attempt of each."""
    if endpoint_id is not None and await store.endpoint(endpoint_id) is None:
        raise NotFound(f"no webhook endpoint {endpoint_id!r}", param="id")
    found = await store.deliveries(
        endpoint_id=endpoint_id, response_id=response_id, owner=owner, limit=limit
    )
    return [
        DeliveryRecord(d, d.webhook_id, await store.attempts(d.endpoint_id, d.response_id))
        for d in found
    ]
