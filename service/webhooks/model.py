"""What the webhooks are made of (endpoints, deliveries, attempts, the change record of an
endpoint) and the ports the use-cases and the deliverer need: the store of all of them
(adapters/store/webhooks.py) and the sender of one signed POST (adapters/webhooks/sender.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal, Protocol

import msgspec

# OpenAI's webhook event types of the Responses API (openai-python
# src/openai/types/webhooks/response_*_webhook_event.py): one per terminal status.
EVENT_TYPES: tuple[str, ...] = (
    "response.completed",
    "response.failed",
    "response.cancelled",
    "response.incomplete",
)

EndpointStatus = Literal["enabled", "disabled", "removed"]
DeliveryStatus = Literal["pending", "delivered", "expired"]
# What one attempt came to: delivered (2xx), retry (it failed and will be tried again),
# expired (it failed and the delivery is older than the max age: given up).
Outcome = Literal["delivered", "retry", "expired"]
# An attempt as recorded: also in_flight (being made now), or abandoned (the process making
# it stopped before it was recorded, its lease lapsed and another process took it over).
AttemptOutcome = Literal["delivered", "retry", "expired", "in_flight", "abandoned"]


class Endpoint(msgspec.Struct, frozen=True, kw_only=True):
    """An owner's webhook endpoint (never its secrets: those stay sealed in the store)."""

    id: str
    owner: str
    url: str
    events: tuple[str, ...]
    status: EndpointStatus
    created_at: float
    updated_at: float
    failing_since: float | None = None
    disabled_reason: str | None = None
    previous_until: float | None = None  # the old secret still signs until then


class EndpointChange(msgspec.Struct, frozen=True, kw_only=True):
    """One line of an endpoint's record: added, disabled, enabled, secret_rotated, removed."""

    endpoint_id: str
    seq: int
    at: float
    action: str
    detail: str | None = None


class Delivery(msgspec.Struct, frozen=True, kw_only=True):
    """One event for one endpoint: made when the response's terminal event was appended."""

    endpoint_id: str
    response_id: str
    owner: str
    event_type: str
    event_at: float
    status: DeliveryStatus
    attempts: int
    next_attempt_at: float
    delivered_at: float | None = None
    last_error: str | None = None

    @property
    def webhook_id(self) -> str:
        """The `webhook-id` header: the same on every attempt (receivers dedupe on it),
        whichever process makes it, so it is derived from what names the delivery."""
        return "wh_" + _digest(f"{self.endpoint_id}:{self.response_id}")

    @property
    def event_id(self) -> str:
        """The event's `id` (`evt_…`): one per terminal event, the same for every endpoint."""
        return "evt_" + _digest(f"{self.response_id}:{self.event_type}")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    """One POST of a delivery, as recorded."""

    endpoint_id: str
    response_id: str
    number: int
    started_at: float
    latency_s: float
    status_code: int | None
    outcome: AttemptOutcome
    error: str | None
    worker: str


class Claimed(msgspec.Struct, frozen=True, kw_only=True):
    """A due delivery this process holds the lease of, with what it needs to send it: the
    endpoint's URL and its sealed secrets (the current one, and the previous one while its
    grace period lasts)."""

    delivery: Delivery
    url: str
    secrets: tuple[str, ...]


class Sent(msgspec.Struct, frozen=True):
    """What one POST came to: the receiver's status (None: no answer) and what went wrong
    (None: a 2xx)."""

    status_code: int | None
    error: str | None


class WebhookStore(Protocol):
    """Endpoints, their deliveries and attempts, in the database."""

    async def add_endpoint(self, endpoint: Endpoint, secret_sealed: str) -> None: ...

    async def endpoint(self, endpoint_id: str) -> Endpoint | None: ...

    async def endpoints(self, owner: str | None) -> list[Endpoint]:
        """Every endpoint (of `owner`), removed ones included, oldest first."""
        ...

    async def changes(self, endpoint_id: str) -> list[EndpointChange]: ...

    async def set_status(
        self,
        endpoint_id: str,
        status: EndpointStatus,
        reason: str | None,
        now: float,
        only_from: EndpointStatus | None = None,
    ) -> Endpoint | None:
        """Enable, disable (with why) or remove; the change is recorded. None: no such one
        (or, with `only_from`, not in that status: one change of several racing ones)."""
        ...

    async def rotate(
        self, endpoint_id: str, secret_sealed: str, previous_until: float, now: float
    ) -> Endpoint | None:
        """The new secret signs from now on; the current one too, until `previous_until`."""
        ...

    async def due(self, now: float, busy: frozenset[str]) -> list[str]:
        """The enabled endpoints (not in `busy`) with a delivery due and not leased."""
        ...

    async def claim(
        self, endpoint_id: str, limit: int, lease_s: float, started_at: float
    ) -> list[Claimed]:
        """Lease up to `limit` due deliveries of one endpoint to this process and record
        the attempt each begins (`in_flight`, numbered on from the delivery's `attempts`);
        an attempt left `in_flight` by a process whose lease lapsed is `abandoned`."""
        ...

    async def record(
        self, claimed: Claimed, attempt: Attempt, next_attempt_at: float | None
    ) -> bool:
        """Record how the attempt `claim` began ended, and its outcome on the delivery
        (`next_attempt_at`: when a retry is due), releasing the lease; False (nothing
        written) when the lease was taken over meanwhile. A delivered attempt clears the
        endpoint's `failing_since`; a failed one sets it if unset."""
        ...

    async def record_many(
        self, records: Sequence[tuple[Claimed, Attempt, float | None]]
    ) -> list[bool]:
        """`record` of several attempts, in one transaction."""
        ...

    async def deliveries(
        self, *, endpoint_id: str | None, response_id: str | None, owner: str | None, limit: int
    ) -> list[Delivery]:
        """Deliveries, newest first."""
        ...

    async def attempts(self, endpoint_id: str, response_id: str) -> list[Attempt]: ...

    async def oldest_pending(self) -> float | None:
        """The `event_at` of the oldest delivery still pending to an enabled endpoint."""
        ...


class Sender(Protocol):
    """Sends one webhook: a POST of `body` with `headers`, bounded by `timeout_s`, to a host
    the operator's rule allows, no redirect followed, the answer read up to a bound."""

    async def post(
        self, url: str, headers: dict[str, str], body: bytes, timeout_s: float
    ) -> Sent: ...

    async def aclose(self) -> None: ...
