"""The deliverer: this process's worker of webhook deliveries, beside its claim loop.

A delivery is made in the transaction that appends its response's terminal event
(adapters/store/webhooks.py `enqueue`), so none is lost to a crash. Any process's deliverer
takes a due one under a lease, as the worker takes a queued background response
(service/work/worker.py, adapters/store/leases.py): one guarded UPDATE, so of two takers
one wins, and a lease that lapses (its process died mid-attempt, `kill -9`) is taken over
by the next. The lease covers one attempt: it lasts the attempt's timeout plus the lease
period, so it needs no renewal, and the attempt's record is written only while this
process still holds it (a process that was too slow writes nothing: the taker's attempt
stands). Every attempt carries the same `webhook-id` (service/webhooks/model.py), so a
receiver that got a POST whose answer was lost dedupes the next.

Retries: after any non-2xx, timeout or connection error, exponential backoff with jitter
(`backoff_s` * 2^(n-1), each delay between half and the whole of that, at most an hour),
until the delivery is `max_age_s` older than its event: then it is `expired`. An endpoint
whose attempts have all failed for `disable_after_s` is disabled, with a record saying why;
its pending deliveries wait until the operator enables it again.

Isolation: each endpoint has its own bound on attempts in flight here (`per_endpoint`), and
its own connection pool (the sender's), so a slow receiver holds only its own slots and a
failing one only backs off its own deliveries.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import random
import time
from collections.abc import Callable
from typing import Protocol

from service.reasoning.sealing import Sealer
from service.webhooks.model import Attempt, Claimed, Outcome, Sender, Sent, WebhookStore
from service.webhooks.signing import body_of, headers_of, open_secret
from service.work.periodic import Periodic

log = logging.getLogger("resplog.webhooks")

MAX_DELAY_S = 3600.0
_GAUGE_EVERY_S = 1.0  # how often the age of the oldest pending delivery is read


class WebhookObserver(Protocol):
    """Told of every attempt's outcome and of the oldest pending delivery (metrics)."""

    def webhook_attempted(self, outcome: Outcome) -> None: ...

    def webhook_pending(self, oldest_age_s: float) -> None: ...


class _Nobody:
    def webhook_attempted(self, outcome: Outcome) -> None:
        pass

    def webhook_pending(self, oldest_age_s: float) -> None:
        pass


def backoff(attempts: int, first_s: float, rand: Callable[[], float] = random.random) -> float:
    """The wait after the `attempts`-th failed attempt: exponential, jittered into its upper
    half (so retries of many deliveries that failed together spread out), capped."""
    full: float = min(MAX_DELAY_S, first_s * 2.0 ** max(0, attempts - 1))
    return full * (0.5 + 0.5 * rand())


class Deliverer:
    """Takes due deliveries and attempts them, each in a task of its own."""

    def __init__(
        self,
        store: WebhookStore,
        sender: Sender,
        sealer: Sealer,
        *,
        worker: str,
        backoff_s: float = 5.0,
        max_age_s: float = 72 * 3600.0,
        timeout_s: float = 10.0,
        lease_s: float = 15.0,
        disable_after_s: float = 72 * 3600.0,
        per_endpoint: int = 16,
        poll_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._sender = sender
        self._sealer = sealer
        self.worker = worker
        self.backoff_s = backoff_s
        self.max_age_s = max_age_s
        self.timeout_s = timeout_s
        self.lease_s = timeout_s + lease_s
        self.disable_after_s = disable_after_s
        self.per_endpoint = per_endpoint
        self._clock = clock
        self._flying: dict[str, int] = {}  # endpoint -> attempts in flight here
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop = Periodic("webhook deliveries", self.pass_once, lambda: poll_s)
        self.observer: WebhookObserver = _Nobody()
        self.attempted = 0  # attempts made so far (tests, benchmarks)
        self._gauged = -_GAUGE_EVERY_S
        Record = tuple[Claimed, Attempt, float | None, asyncio.Future[bool]]
        self._records: list[Record] = []  # attempts ended, waiting to be recorded
        self._recording: asyncio.Task[None] | None = None

    def wake(self) -> None:
        self._loop.kick()

    def start(self) -> None:
        self._loop.start()

    async def stop(self, grace_s: float = 0.0) -> None:
        """Stop taking deliveries; let the attempts in flight finish within `grace_s`, and
        end the rest: their leases lapse and another process (or this one, restarted)
        attempts them again, under the same webhook-id."""
        await self._loop.stop()
        if self._tasks and grace_s > 0:
            await asyncio.wait(list(self._tasks), timeout=grace_s)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._recording is not None:  # what ended is recorded before the process goes
            await asyncio.gather(self._recording, return_exceptions=True)
        await self._sender.aclose()

    async def pass_once(self) -> int:
        """Take what is due, for every endpoint with room here; the number taken."""
        now = time.monotonic()
        if now - self._gauged >= _GAUGE_EVERY_S:  # an aggregate: not at every pass
            self._gauged = now
            oldest = await self._store.oldest_pending()
            age = 0.0 if oldest is None else max(0.0, self._clock() - oldest)
            self.observer.webhook_pending(age)
        busy = frozenset(e for e, n in self._flying.items() if n >= self.per_endpoint)
        taken = 0
        for endpoint_id in await self._store.due(self._clock(), busy):
            room = self.per_endpoint - self._flying.get(endpoint_id, 0)
            if room <= 0:
                continue
            taking = await self._store.claim(endpoint_id, room, self.lease_s, self._clock())
            for claimed in taking:
                self._launch(claimed)
                taken += 1
        return taken

    def _launch(self, claimed: Claimed) -> None:
        eid = claimed.delivery.endpoint_id
        self._flying[eid] = self._flying.get(eid, 0) + 1
        task = asyncio.create_task(self._attempt(claimed), name="resplog-webhook")
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._done(t, eid))

    def _done(self, task: asyncio.Task[None], endpoint_id: str) -> None:
        self._tasks.discard(task)
        left = self._flying.get(endpoint_id, 1) - 1
        if left > 0:
            self._flying[endpoint_id] = left
        else:
            self._flying.pop(endpoint_id, None)
        if not task.cancelled() and task.exception() is not None:
            log.warning("webhook attempt failed to record (%s)", task.exception())
        self.wake()  # a slot came free: more of that endpoint may be due

    async def _attempt(self, claimed: Claimed) -> None:
        d = claimed.delivery
        started = self._clock()
        opened = [s for s in (open_secret(self._sealer, b) for b in claimed.secrets) if s]
        latency = 0.0
        if started - d.event_at >= self.max_age_s:  # waited out its age (endpoint disabled)
            sent = Sent(None, "not sent: older than --webhook-max-age-h")
        elif not opened:
            sent = Sent(None, "the endpoint's secret does not open here (another --reasoning-key?)")
        else:
            body = body_of(d)
            headers = headers_of(d, opened, body, int(started))
            began = time.monotonic()
            sent = await self._sender.post(claimed.url, headers, body, self.timeout_s)
            latency = time.monotonic() - began
        self.attempted += 1
        now = self._clock()
        number = d.attempts  # `claim` counted this attempt
        outcome: Outcome
        next_at: float | None = None
        if sent.error is None:
            outcome = "delivered"
        elif now - d.event_at >= self.max_age_s:
            outcome = "expired"
        else:
            outcome = "retry"
            next_at = now + backoff(number, self.backoff_s)
        attempt = Attempt(
            endpoint_id=d.endpoint_id,
            response_id=d.response_id,
            number=number,
            started_at=started,
            latency_s=latency,
            status_code=sent.status_code,
            outcome=outcome,
            error=sent.error,
            worker=self.worker,
        )
        if not await self._record(claimed, attempt, next_at):
            log.info(
                "lease on webhook %s lapsed mid-attempt; its taker's record stands", d.webhook_id
            )
            return
        self.observer.webhook_attempted(outcome)
        if outcome != "delivered":
            await self._maybe_disable(d.endpoint_id, now)

    async def _record(self, claimed: Claimed, attempt: Attempt, next_at: float | None) -> bool:
        """Record an attempt, with those that end while a record is being written: one
        transaction (one commit) for them all."""
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._records.append((claimed, attempt, next_at, waiter))
        if self._recording is None or self._recording.done():
            self._recording = asyncio.create_task(self._write_records(), name="resplog-records")
        return await waiter

    async def _write_records(self) -> None:
        while self._records:
            batch, self._records = self._records, []
            try:
                done = await self._store.record_many([(c, a, n) for c, a, n, _ in batch])
            except Exception as exc:  # the attempts' leases lapse: they are made again
                for *_, waiter in batch:
                    if not waiter.done():
                        waiter.set_exception(exc)
                continue
            for (*_, waiter), ok in zip(batch, done, strict=True):
                if not waiter.done():
                    waiter.set_result(ok)

    async def _maybe_disable(self, endpoint_id: str, now: float) -> None:
        endpoint = await self._store.endpoint(endpoint_id)
        if endpoint is None or endpoint.status != "enabled" or endpoint.failing_since is None:
            return
        if now - endpoint.failing_since < self.disable_after_s:
            return
        since = datetime.datetime.fromtimestamp(endpoint.failing_since, datetime.UTC)
        reason = (
            f"every attempt failed since {since:%Y-%m-%dT%H:%M:%SZ} "
            f"({self.disable_after_s / 3600:g} h, --webhook-disable-after-h)"
        )
        # Only from enabled: attempts ending together may each find it failing too long,
        # and the endpoint is disabled, and its record written, once.
        if await self._store.set_status(endpoint_id, "disabled", reason, now, only_from="enabled"):
            log.warning("webhook endpoint %s disabled: %s", endpoint_id, reason)
