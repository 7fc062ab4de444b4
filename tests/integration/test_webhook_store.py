"""Webhooks in the store, on both databases: the deliveries a terminal event makes in its
own transaction (and those it must not), and their leases: one taker, fencing, takeover."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from adapters.sealing import AesGcmSealer
from adapters.store.factory import open_store
from adapters.store.migrate import upgrade
from adapters.store.sql import SqlEventStore
from adapters.store.webhooks import SqlWebhooks
from service.webhooks import manage
from service.webhooks.model import Attempt, Claimed
from tests.integration import streams
from tests.integration.test_store_contract import write

SEALER = AesGcmSealer([b"k" * 32])
Opener = Callable[[str], Awaitable[SqlWebhooks]]


@pytest.fixture(params=["postgres", "sqlite"])
def hook_db(
    request: pytest.FixtureRequest,
    fresh_pg: Callable[[], str],
    tmp_path: Any,
) -> str:
    url = fresh_pg() if request.param == "postgres" else f"sqlite+aiosqlite:///{tmp_path / 'w.db'}"
    upgrade(url)
    return url


@pytest.fixture
async def proc(hook_db: str) -> AsyncIterator[Opener]:
    """The webhooks of a store opened as a process named `owner` would."""
    opened: list[SqlEventStore] = []

    async def open_as(owner: str) -> SqlWebhooks:
        store = await open_store(hook_db, lease_owner=owner, poll_interval=0.2)
        opened.append(store)
        return SqlWebhooks(store)

    yield open_as
    for store in opened:
        await store.close()


async def add(hooks: SqlWebhooks, owner: str, events: str) -> str:
    new = await manage.add_endpoint(
        hooks, SEALER, "http://127.0.0.1:9/hook", events.split(","), owner, now=time.time()
    )
    return new.endpoint.id


async def test_a_terminal_event_makes_the_deliveries_of_its_owners_endpoints(
    proc: Opener,
) -> None:
    hooks = await proc("p1")
    store = hooks._store
    completed = await add(hooks, "owner_a", "response.completed")
    failed_only = await add(hooks, "owner_a", "response.failed")
    other_owner = await add(hooks, "owner_b", "response.completed")
    removed = await add(hooks, "owner_a", "response.completed")
    disabled = await add(hooks, "owner_a", "response.completed,response.failed")
    await manage.set_status(hooks, removed, "removed")
    await manage.set_status(hooks, disabled, "disabled", "by hand")

    done = await write(store, streams.script(background=True, owner="owner_a"))
    found = await hooks.deliveries(endpoint_id=None, response_id=done, owner=None, limit=10)
    assert sorted(d.endpoint_id for d in found) == sorted([completed, disabled])
    assert {d.event_type for d in found} == {"response.completed"}
    assert all(d.status == "pending" and d.attempts == 0 for d in found)

    failed = await write(store, streams.script(background=True, owner="owner_a", end="failed"))
    found = await hooks.deliveries(endpoint_id=None, response_id=failed, owner=None, limit=10)
    assert sorted(d.endpoint_id for d in found) == sorted([failed_only, disabled])

    foreground = await write(store, streams.script(owner="owner_a"))
    assert (
        await hooks.deliveries(endpoint_id=None, response_id=foreground, owner=None, limit=9) == []
    )
    open_one = await write(store, streams.script(background=True, owner="owner_a", end="open"))
    assert await hooks.deliveries(endpoint_id=None, response_id=open_one, owner=None, limit=9) == []
    assert (
        await hooks.deliveries(endpoint_id=other_owner, response_id=None, owner=None, limit=9) == []
    )
    # The disabled endpoint's deliveries wait: only the enabled one's are due.
    assert await hooks.due(time.time() + 1, frozenset()) in (
        [completed, failed_only],
        [failed_only, completed],
    )
    changes = [c.action for c in await hooks.changes(disabled)]
    assert changes == ["added", "disabled"]


def _attempt(claimed: Claimed, worker: str) -> Attempt:
    d = claimed.delivery
    return Attempt(
        endpoint_id=d.endpoint_id,
        response_id=d.response_id,
        number=d.attempts,
        started_at=time.time(),
        latency_s=0.01,
        status_code=200,
        outcome="delivered",
        error=None,
        worker=worker,
    )


async def test_one_taker_a_lapsed_lease_is_taken_over_and_the_late_one_fenced(
    proc: Opener,
) -> None:
    first, second = await proc("p1"), await proc("p2")
    # Long enough that a loaded machine (the suite's two workers) does not let it lapse
    # between the claim and the check that it holds.
    lease = 2.0
    endpoint = await add(first, "owner_a", "response.completed")
    rid = await write(first._store, streams.script(background=True, owner="owner_a"))
    taken = await asyncio.gather(
        first.claim(endpoint, 5, lease, time.time()),
        second.claim(endpoint, 5, lease, time.time()),
    )
    assert sorted(len(t) for t in taken) == [0, 1]  # of two takers, one
    holder, other = (first, second) if taken[0] else (second, first)
    claimed = (taken[0] or taken[1])[0]
    assert claimed.delivery.response_id == rid and claimed.delivery.attempts == 1
    assert len(claimed.secrets) == 1
    assert await other.claim(endpoint, 5, lease, time.time()) == []  # leased
    await asyncio.sleep(lease + 0.1)
    again = await other.claim(endpoint, 5, lease, time.time())
    assert [c.delivery.attempts for c in again] == [2]
    # The process whose lease lapsed writes nothing; the taker's record stands.
    assert await holder.record(claimed, _attempt(claimed, holder.owner), None) is False
    assert await other.record(again[0], _attempt(again[0], other.owner), None) is True
    attempts = await other.attempts(endpoint, rid)
    assert [(a.number, a.outcome, a.worker) for a in attempts] == [
        (1, "abandoned", holder.owner),
        (2, "delivered", other.owner),
    ]
    assert (await other.deliveries(endpoint_id=endpoint, response_id=rid, owner=None, limit=1))[
        0
    ].status == "delivered"
    assert await other.oldest_pending() is None
