"""Webhooks in the database (the `WebhookStore` port of service/webhooks/model.py): the
endpoints and their record, the deliveries and their attempts (tables.py, migration 0012).

The deliveries are made by adapters/store/outbox.py, in the transaction that appends a
response's terminal event.

Deliveries are leased as background responses are (adapters/store/leases.py): one guarded
UPDATE takes them, `FOR UPDATE SKIP LOCKED` on PostgreSQL so that concurrent takers skip
each other's rows, and lease times on the database's clock there. On Citus, where the
deliveries are distributed by their response (adapters/store/citus.py) and an UPDATE over
shards may hold neither a volatile function nor a locking subquery, the candidates are read
across shards and each taken by a guarded update of its own row, with the coordinator's
`statement_timestamp()` for the clock.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.store.sql import SqlEventStore
from adapters.store.tables import (
    webhook_attempts as t_att,
)
from adapters.store.tables import (
    webhook_deliveries as t_del,
)
from adapters.store.tables import (
    webhook_endpoint_log as t_log,
)
from adapters.store.tables import (
    webhook_endpoints as t_end,
)
from service.webhooks.model import (
    Attempt,
    Claimed,
    Delivery,
    Endpoint,
    EndpointChange,
    EndpointStatus,
)


def _endpoint(row: Any) -> Endpoint:
    m = row._mapping
    return Endpoint(
        id=m["id"],
        owner=m["owner"],
        url=m["url"],
        events=tuple(e for e in m["events"].split(",") if e),
        status=m["status"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        failing_since=m["failing_since"],
        disabled_reason=m["disabled_reason"],
        previous_until=m["previous_until"],
    )


def _delivery(row: Any) -> Delivery:
    m = row._mapping
    return Delivery(**{name: m[name] for name in Delivery.__struct_fields__})


def _attempt(row: Any) -> Attempt:
    m = row._mapping
    return Attempt(**{name: m[name] for name in Attempt.__struct_fields__})


_STATUS = {"delivered": "delivered", "retry": "pending", "expired": "expired"}
_ABANDONED = "the process making it stopped before it was recorded (its lease lapsed)"
_ENDPOINT_COLUMNS = [c for c in t_end.c if c.name not in ("secret_sealed", "previous_sealed")]
_DELIVERY_COLUMNS = [t_del.c[name] for name in Delivery.__struct_fields__]


class SqlWebhooks:
    """The webhook tables of one store; deliveries are leased to the store's `lease_owner`
    (a store opened without one, the CLI's, only manages endpoints and reads)."""

    def __init__(self, store: SqlEventStore) -> None:
        self._store = store
        self.owner = store.settings.lease_owner or "cli"
        self._pg = store.dialect == "postgresql"

    # --- endpoints ------------------------------------------------------------------------

    async def add_endpoint(self, endpoint: Endpoint, secret_sealed: str) -> None:
        async with self._store.begin_write() as conn:
            await conn.execute(
                sa.insert(t_end).values(
                    id=endpoint.id,
                    owner=endpoint.owner,
                    url=endpoint.url,
                    events="," + ",".join(endpoint.events) + ",",
                    status=endpoint.status,
                    secret_sealed=secret_sealed,
                    created_at=endpoint.created_at,
                    updated_at=endpoint.updated_at,
                )
            )
            detail = f"{endpoint.url} for {','.join(endpoint.events)}"
            await self._log(conn, endpoint.id, endpoint.created_at, "added", detail)

    async def endpoint(self, endpoint_id: str) -> Endpoint | None:
        async with self._store.engine.connect() as conn:
            row = (
                await conn.execute(sa.select(*_ENDPOINT_COLUMNS).where(t_end.c.id == endpoint_id))
            ).first()
        return None if row is None else _endpoint(row)

    async def endpoints(self, owner: str | None) -> list[Endpoint]:
        query = sa.select(*_ENDPOINT_COLUMNS).order_by(t_end.c.created_at, t_end.c.id)
        if owner is not None:
            query = query.where(t_end.c.owner == owner)
        async with self._store.engine.connect() as conn:
            return [_endpoint(row) for row in await conn.execute(query)]

    async def changes(self, endpoint_id: str) -> list[EndpointChange]:
        query = sa.select(t_log).where(t_log.c.endpoint_id == endpoint_id).order_by(t_log.c.seq)
        async with self._store.engine.connect() as conn:
            return [
                EndpointChange(**{k: r._mapping[k] for k in EndpointChange.__struct_fields__})
                for r in await conn.execute(query)
            ]

    async def set_status(
        self,
        endpoint_id: str,
        status: EndpointStatus,
        reason: str | None,
        now: float,
        only_from: EndpointStatus | None = None,
    ) -> Endpoint | None:
        values: dict[str, Any] = {"status": status, "updated_at": now}
        values["disabled_reason"] = reason if status == "disabled" else None
        if status == "enabled":  # a fresh start: its failures so far no longer count
            values["failing_since"] = None
        action = {"enabled": "enabled", "disabled": "disabled", "removed": "removed"}[status]
        async with self._store.begin_write() as conn:
            update = sa.update(t_end).where(t_end.c.id == endpoint_id, t_end.c.status != "removed")
            if only_from is not None:
                update = update.where(t_end.c.status == only_from)
            done = await conn.execute(update.values(**values))
            if done.rowcount == 0:
                return None
            await self._log(conn, endpoint_id, now, action, reason)
        return await self.endpoint(endpoint_id)

    async def rotate(
        self, endpoint_id: str, secret_sealed: str, previous_until: float, now: float
    ) -> Endpoint | None:
        async with self._store.begin_write() as conn:
            done = await conn.execute(
                sa.update(t_end)
                .where(t_end.c.id == endpoint_id, t_end.c.status != "removed")
                .values(
                    previous_sealed=t_end.c.secret_sealed,
                    previous_until=previous_until,
                    secret_sealed=secret_sealed,
                    updated_at=now,
                )
            )
            if done.rowcount == 0:
                return None
            await self._log(
                conn,
                endpoint_id,
                now,
                "secret_rotated",
                f"the old secret signs too until {previous_until:.0f}",
            )
        return await self.endpoint(endpoint_id)

    async def _log(
        self, conn: AsyncConnection, endpoint_id: str, at: float, action: str, detail: str | None
    ) -> None:
        last = (
            await conn.execute(
                sa.select(sa.func.max(t_log.c.seq)).where(t_log.c.endpoint_id == endpoint_id)
            )
        ).scalar()
        seq = 0 if last is None else last + 1
        await conn.execute(
            sa.insert(t_log).values(
                endpoint_id=endpoint_id, seq=seq, at=at, action=action, detail=detail
            )
        )

    # --- deliveries -----------------------------------------------------------------------

    def _citus(self) -> bool:
        return self._store.citus  # known once the store started

    def _now(self) -> sa.ColumnElement[float]:
        """Now, in unix seconds: the database's clock on PostgreSQL (so processes whose
        clocks disagree agree on a lease's expiry), ours on SQLite (one machine)."""
        if self._pg:
            clock = sa.func.statement_timestamp() if self._citus() else sa.func.clock_timestamp()
            return sa.cast(sa.extract("epoch", clock), sa.Double)
        return sa.literal(time.time(), sa.Double)

    def _free(self, now: sa.ColumnElement[float]) -> sa.ColumnElement[bool]:
        return sa.or_(t_del.c.lease_owner.is_(None), t_del.c.lease_expires_at < now)

    async def due(self, now: float, busy: frozenset[str]) -> list[str]:
        enabled = sa.select(t_end.c.id).where(t_end.c.status == "enabled")
        query = (
            sa.select(t_del.c.endpoint_id)
            .where(
                t_del.c.status == "pending",
                t_del.c.next_attempt_at <= now,
                self._free(self._now()),
                t_del.c.endpoint_id.in_(enabled.scalar_subquery()),
            )
            .distinct()
        )
        if busy:
            query = query.where(t_del.c.endpoint_id.not_in(list(busy)))
        async with self._store.engine.connect() as conn:
            return [row[0] for row in await conn.execute(query)]

    async def claim(
        self, endpoint_id: str, limit: int, lease_s: float, started_at: float
    ) -> list[Claimed]:
        now = self._now()
        wall = time.time()
        async with self._store.begin_write() as conn:
            end = (
                await conn.execute(
                    sa.select(
                        t_end.c.url,
                        t_end.c.secret_sealed,
                        t_end.c.previous_sealed,
                        t_end.c.previous_until,
                    ).where(t_end.c.id == endpoint_id, t_end.c.status == "enabled")
                )
            ).first()
            if end is None:
                return []
            pick = (
                sa.select(t_del.c.response_id)
                .where(
                    t_del.c.endpoint_id == endpoint_id,
                    t_del.c.status == "pending",
                    t_del.c.next_attempt_at <= wall,
                    self._free(now),
                )
                .order_by(t_del.c.next_attempt_at)
                .limit(limit)
            )
            take = sa.update(t_del).values(
                lease_owner=self.owner,
                lease_expires_at=now + lease_s,
                attempts=t_del.c.attempts + 1,
            )
            rows: list[Any] = []
            if self._citus():
                for rid in (await conn.execute(pick)).scalars().all():
                    mine = take.where(
                        t_del.c.endpoint_id == endpoint_id,
                        t_del.c.response_id == rid,
                        t_del.c.status == "pending",
                        self._free(now),
                    )
                    rows += (await conn.execute(mine.returning(*_DELIVERY_COLUMNS))).all()
            else:
                if self._pg:
                    pick = pick.with_for_update(skip_locked=True)
                stmt = take.where(
                    t_del.c.endpoint_id == endpoint_id,
                    t_del.c.response_id.in_(pick.scalar_subquery()),
                ).returning(*_DELIVERY_COLUMNS)
                rows += (await conn.execute(stmt)).all()
            taken = [_delivery(r) for r in rows]
            if taken:
                ids = [d.response_id for d in taken]
                await conn.execute(
                    sa.update(t_att)
                    .where(
                        t_att.c.endpoint_id == endpoint_id,
                        t_att.c.response_id.in_(ids),
                        t_att.c.outcome == "in_flight",
                    )
                    .values(outcome="abandoned", error=_ABANDONED)
                )
                await conn.execute(
                    sa.insert(t_att),
                    [
                        {
                            "endpoint_id": endpoint_id,
                            "response_id": d.response_id,
                            "number": d.attempts,
                            "started_at": started_at,
                            "latency_s": 0.0,
                            "status_code": None,
                            "outcome": "in_flight",
                            "error": None,
                            "worker": self.owner,
                        }
                        for d in taken
                    ],
                )
        secrets = [end.secret_sealed]
        if end.previous_sealed is not None and (end.previous_until or 0) > wall:
            secrets.append(end.previous_sealed)
        return [Claimed(delivery=d, url=end.url, secrets=tuple(secrets)) for d in taken]

    async def record(
        self, claimed: Claimed, attempt: Attempt, next_attempt_at: float | None
    ) -> bool:
        return (await self.record_many([(claimed, attempt, next_attempt_at)]))[0]

    async def record_many(
        self, records: Sequence[tuple[Claimed, Attempt, float | None]]
    ) -> list[bool]:
        """`record` of several attempts in one transaction (one commit for all: the
        deliverer groups the attempts that end while a record is being written)."""
        recorded: list[bool] = []
        failing: dict[str, float | None] = {}  # endpoint -> first failure (None: delivered)
        async with self._store.begin_write() as conn:
            for claimed, attempt, next_attempt_at in records:
                d = claimed.delivery
                status = _STATUS[attempt.outcome]
                ended = attempt.started_at + attempt.latency_s
                done = await conn.execute(
                    sa.update(t_del)
                    .where(
                        t_del.c.endpoint_id == d.endpoint_id,
                        t_del.c.response_id == d.response_id,
                        t_del.c.lease_owner == self.owner,
                        t_del.c.status == "pending",
                        t_del.c.attempts == attempt.number,
                    )
                    .values(
                        status=status,
                        next_attempt_at=ended if next_attempt_at is None else next_attempt_at,
                        delivered_at=ended if status == "delivered" else None,
                        last_error=attempt.error,
                        lease_owner=None,
                        lease_expires_at=None,
                    )
                )
                recorded.append(done.rowcount > 0)
                if done.rowcount == 0:
                    continue
                await conn.execute(
                    sa.update(t_att)
                    .where(
                        t_att.c.endpoint_id == d.endpoint_id,
                        t_att.c.response_id == d.response_id,
                        t_att.c.number == attempt.number,
                    )
                    .values(
                        started_at=attempt.started_at,
                        latency_s=attempt.latency_s,
                        status_code=attempt.status_code,
                        outcome=attempt.outcome,
                        error=attempt.error,
                    )
                )
                if attempt.outcome == "delivered":
                    failing[d.endpoint_id] = None
                elif d.endpoint_id not in failing or failing[d.endpoint_id] is not None:
                    earlier = failing.get(d.endpoint_id)
                    failing[d.endpoint_id] = min(attempt.started_at, earlier or attempt.started_at)
            # An endpoint delivered to is not failing; one that only failed is, since its
            # first failure (if it was not already).
            for endpoint_id, since in failing.items():
                where = t_end.c.id == endpoint_id
                if since is None:
                    stmt = sa.update(t_end).where(where, t_end.c.failing_since.is_not(None))
                    await conn.execute(stmt.values(failing_since=None))
                else:
                    stmt = sa.update(t_end).where(where, t_end.c.failing_since.is_(None))
                    await conn.execute(stmt.values(failing_since=since))
        return recorded

    async def deliveries(
        self, *, endpoint_id: str | None, response_id: str | None, owner: str | None, limit: int
    ) -> list[Delivery]:
        query = sa.select(*_DELIVERY_COLUMNS)
        if endpoint_id is not None:
            query = query.where(t_del.c.endpoint_id == endpoint_id)
        if response_id is not None:
            query = query.where(t_del.c.response_id == response_id)
        if owner is not None:
            query = query.where(t_del.c.owner == owner)
        query = query.order_by(t_del.c.event_at.desc(), t_del.c.endpoint_id).limit(limit)
        async with self._store.engine.connect() as conn:
            return [_delivery(row) for row in await conn.execute(query)]

    async def attempts(self, endpoint_id: str, response_id: str) -> list[Attempt]:
        query = (
            sa.select(t_att)
            .where(t_att.c.endpoint_id == endpoint_id, t_att.c.response_id == response_id)
            .order_by(t_att.c.number)
        )
        async with self._store.engine.connect() as conn:
            return [_attempt(row) for row in await conn.execute(query)]

    async def oldest_pending(self) -> float | None:
        enabled = sa.select(t_end.c.id).where(t_end.c.status == "enabled")
        query = sa.select(sa.func.min(t_del.c.event_at)).where(
            t_del.c.status == "pending", t_del.c.endpoint_id.in_(enabled.scalar_subquery())
        )
        async with self._store.engine.connect() as conn:
            value = (await conn.execute(query)).scalar()
        return None if value is None else float(value)
