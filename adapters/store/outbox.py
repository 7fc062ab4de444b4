"""The webhook outbox: the deliveries a flush makes, in its own transaction.

`enqueue` is called by the store in the transaction that appends events
(`SqlEventStore._write`): a response that ends there (its terminal event is in the batch)
and was a background one gets one delivery (tables.py `webhook_deliveries`) per endpoint
of its owner that hears its event type, a disabled one too (its deliveries wait, within
their max age, until it is enabled), committed with the terminal event or not at all, so a
crash can lose none. A flush with no background response ending runs nothing.

On Citus (`routed`), where the deliveries are distributed by their response and co-located
with it, and the endpoints are a reference table, the endpoints are read with a join on the
response's row and the deliveries inserted as a multi-row `VALUES`: two statements that
Citus routes to the flush's shard. An `INSERT ... SELECT` of the same join is planned as a
task per shard, so a stopped worker would fail every flush that ends a background response.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from adapters.store.rows import Append
from adapters.store.tables import webhook_deliveries
from domain.objects import TERMINAL_STATUSES


class _Background(msgspec.Struct):
    background: bool = False


_background = msgspec.json.Decoder(_Background)

_ENQUEUE = (
    "INSERT INTO webhook_deliveries (endpoint_id, response_id, owner, event_type, event_at, "
    "status, attempts, next_attempt_at) "
    "SELECT e.id, r.id, r.owner, :event_type, :now, 'pending', 0, :now "
    "FROM responses r JOIN webhook_endpoints e ON e.owner = r.owner "
    "WHERE r.id = :rid AND e.status <> 'removed' AND e.events LIKE :pattern"
)


def ends_background(batch: Append) -> bool:
    """Whether `batch` ends a background response (so it may make deliveries)."""
    life = batch.lifecycle
    if life is None or life.status not in TERMINAL_STATUSES:
        return False
    return _background.decode(life.snapshot).background


_HEARING = (
    "SELECT e.id, r.owner FROM responses r JOIN webhook_endpoints e ON e.owner = r.owner "
    "WHERE r.id = :rid AND e.status <> 'removed' AND e.events LIKE :pattern"
)


async def enqueue(
    conn: AsyncConnection,
    batches: Sequence[Append],
    now: float,
    dialect: str,
    *,
    routed: bool = False,
) -> None:
    """The deliveries of the background responses that end in `batches` (see above)."""
    ended = []
    for batch in batches:
        life = batch.lifecycle
        if life is None or not ends_background(batch):
            continue
        kind = f"response.{life.status}"
        ended.append(
            {"rid": batch.stream_id, "event_type": kind, "now": now, "pattern": f"%,{kind},%"}
        )
    if not ended:
        return
    if routed:
        await _enqueue_routed(conn, ended)
        return
    if dialect == "postgresql":
        sql = _ENQUEUE + " ON CONFLICT DO NOTHING"
    else:
        sql = _ENQUEUE.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)
    await conn.execute(sa.text(sql), ended)


async def _enqueue_routed(conn: AsyncConnection, ended: list[dict[str, object]]) -> None:
    """`enqueue` on Citus (see the module)."""
    rows = []
    for one in ended:
        hearing = await conn.execute(sa.text(_HEARING), one)
        rows += [
            {
                "endpoint_id": endpoint_id,
                "response_id": one["rid"],
                "owner": owner,
                "event_type": one["event_type"],
                "event_at": one["now"],
                "status": "pending",
                "attempts": 0,
                "next_attempt_at": one["now"],
            }
            for endpoint_id, owner in hearing
        ]
    if rows:
        await conn.execute(pg_insert(webhook_deliveries).values(rows).on_conflict_do_nothing())
