"""resplog on Citus: the distribution of the log (`resplog migrate --citus`), how a store
finds out that it runs on one, and the statements that differ there.

The log is distributed by the stream a row belongs to, all in one co-location group, so
that everything one stream's append touches is on one shard: `responses` by its id,
`events` by `stream_id` (its daily partitions are distributed with it), `conversations` by
id and `conversation_items` by `conversation_id` (a conversation is a stream of `events`
too), `prompts` by id (a prompt is a stream too), `erasures` by the stream erased,
`webhook_deliveries` and `webhook_attempts` by their response (the flush that ends a
background response makes its deliveries on its shard), and `blobs` by their digest.
`api_keys`, `webhook_endpoints` and `webhook_endpoint_log`, read often (the endpoints by
every flush that ends a background response, joined to its row on its shard) and written
rarely, are reference tables (a copy on every node). `alembic_version` and `checkpoints`
(the signed checkpoints, written every few minutes by the coordinator's clients and joined
with nothing) stay on the coordinator, the only node resplog talks to.

A statement on Citus runs on one shard when it names one value of the distribution column,
so the hot path names them (docs/scale.md lists what does not):

- the flush is one transaction per shard (`PostgresEventStore`): its guarded row updates
  name their ids (`r.id = ANY(...)`), the event rows go as a multi-row `VALUES`, which
  Citus routes to the shard they are on (an `INSERT ... SELECT` of arrays would go through
  the coordinator as intermediate results, and a flush over several shards would be a
  two-phase commit). Its statements go one by one, not as one statement of CTEs as on one
  PostgreSQL (`commit_one`): Citus plans each CTE's rows as an intermediate result that it
  sends to every worker, so such a statement needs every worker up (a stopped worker would
  fail every shard's flush), and it measured 2.5 times the flush time of the statements
  one by one (docs/scale.md);
- no function that Citus refuses in a distributed `UPDATE`: a volatile one anywhere
  (`clock_timestamp()`), a stable one inside `CASE`. Lease times stay the database's clock
  (the coordinator's `statement_timestamp()`, which Citus evaluates once and sends as a
  constant), with the `CASE` moved to a term that is NULL or 0;
- claiming queued work reads the candidates across shards (once a second per process, at
  most `limit` rows) and takes each with a guarded update of its own row; renewal updates
  one row per statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from domain.errors import NotMigrated, StoreError
from domain.objects import TERMINAL_STATUSES

# (table, distribution column, co-located with), in the order they are distributed: the
# first of the group anchors it.
DISTRIBUTED: tuple[tuple[str, str, str | None], ...] = (
    ("responses", "id", None),
    ("events", "stream_id", "responses"),
    ("conversations", "id", "responses"),
    ("conversation_items", "conversation_id", "responses"),
    ("blobs", "sha256", "responses"),
    ("prompts", "id", "responses"),
    ("erasures", "stream_id", "responses"),
    ("webhook_deliveries", "response_id", "responses"),
    ("webhook_attempts", "response_id", "responses"),
)
REFERENCE: tuple[str, ...] = ("api_keys", "webhook_endpoints", "webhook_endpoint_log")
# On the coordinator alone: `resplog migrate`'s record, the signed checkpoints, and the
# chain-break count, which nothing reads or writes on Citus (its processes keep no chain's
# history, service/prompts/chains.py: the count would be a row on no shard of the chain).
LOCAL: tuple[str, ...] = ("alembic_version", "checkpoints", "chain_breaks")
TABLES = frozenset(name for name, _, _ in DISTRIBUTED) | frozenset(REFERENCE)


class NotCitus(StoreError):
    """`migrate --citus` on a server that cannot take it (no extension, no worker)."""


async def installed(conn: AsyncConnection) -> bool:
    """Whether the database has the Citus extension."""
    query = sa.text("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")
    return bool((await conn.execute(query)).scalar())


async def distributed(conn: AsyncConnection) -> dict[str, str]:
    """The log's tables Citus knows, with their method ('h' hash, 'n' reference); empty
    where the extension is not installed."""
    if not await installed(conn):
        return {}
    rows = await conn.execute(
        sa.text("SELECT logicalrelid::regclass::text, partmethod::text FROM pg_dist_partition")
    )
    return {name: method for name, method in rows if name in TABLES}


def wanted() -> dict[str, str]:
    return {**{name: "h" for name, _, _ in DISTRIBUTED}, **{name: "n" for name in REFERENCE}}


async def mode(conn: AsyncConnection) -> bool:
    """Whether the log is distributed (True) or on one PostgreSQL (False); a log that is
    partly distributed is refused with the command that finishes it."""
    found = await distributed(conn)
    if not found:
        return False
    if found != wanted():
        missing = sorted(name for name, how in wanted().items() if found.get(name) != how)
        raise NotMigrated(
            "the log is half distributed on Citus (not as `resplog migrate --citus` leaves "
            f"it: {', '.join(missing)}): run `resplog migrate --citus` on the coordinator"
        )
    return True


async def usable(conn: AsyncConnection) -> None:
    """Raise `NotCitus` unless the database is a Citus coordinator with a worker."""
    if not await installed(conn):
        raise NotCitus(
            "the database has no Citus extension: install Citus on every node, add "
            "shared_preload_libraries = 'citus', then CREATE EXTENSION citus"
        )
    workers = await conn.execute(
        sa.text(
            "SELECT count(*) FROM pg_dist_node "
            "WHERE groupid <> 0 AND noderole = 'primary' AND isactive"
        )
    )
    if not workers.scalar():
        raise NotCitus(
            "the Citus coordinator has no worker: add them first "
            "(SELECT citus_add_node('host', port))"
        )


async def distribute(conn: AsyncConnection, shards: int | None = None) -> list[str]:
    """Distribute the log's tables (a migrated database, on a Citus coordinator with at
    least one worker) in the caller's transaction; what it distributed. A table already
    distributed as wanted is left as it is, so a run that was interrupted is finished by
    the next. Rows already in a table are moved to its shards. `shards`: how many shards
    each table has (None: the server's `citus.shard_count`, 32 by default). A flush is a
    transaction per shard it touches, so fewer shards mean fewer transactions a flush."""
    await usable(conn)
    found = await distributed(conn)
    wrong = sorted(name for name, how in found.items() if wanted()[name] != how)
    if wrong:
        raise NotCitus(f"tables distributed otherwise than resplog's plan: {', '.join(wrong)}")
    done: list[str] = []
    for name, column, group in DISTRIBUTED:
        if name in found:
            continue
        if group is None and shards is not None:  # the group's first: its shard count
            await conn.execute(
                sa.text("SELECT create_distributed_table(:t, :c, shard_count => :n)"),
                {"t": name, "c": column, "n": shards},
            )
        else:
            await conn.execute(
                sa.text("SELECT create_distributed_table(:t, :c, colocate_with => :g)"),
                {"t": name, "c": column, "g": group or "none"},
            )
        done.append(name)
    for name in REFERENCE:
        if name not in found:
            await conn.execute(sa.text("SELECT create_reference_table(:t)"), {"t": name})
            done.append(name)
    return done


# --- the statements that differ -----------------------------------------------------------

_NOW = "extract(epoch FROM statement_timestamp())::float8"
_TERMINAL = ", ".join(f"'{s}'" for s in sorted(TERMINAL_STATUSES))

# The flush's guards (postgres.py's `_CLAIM_MOVED` and `_CLAIM_LIFECYCLE`), naming their
# ids so that Citus routes each to the one shard they are on.
CLAIM_MOVED = f"""
UPDATE responses AS r
SET version = u.version, updated_at = $2, head_digest = u.head,
    lease_expires_at = {_NOW} + $4::float8 + CASE WHEN r.lease_owner IS NOT NULL THEN 0 END
FROM (SELECT c->>0, (c->>1)::int, (c->>2)::int, c->>3 FROM jsonb_array_elements($1::jsonb) AS c)
     AS u(id, expected, version, head)
WHERE r.id = u.id AND r.version = u.expected
  AND (r.lease_owner IS NULL OR r.lease_owner = $3::text) AND r.id = ANY($5::text[])
RETURNING r.id
"""

CLAIM_LIFECYCLE = f"""
UPDATE responses AS r
SET version = u.version, updated_at = u.updated_at, status = u.status,
    snapshot = u.snapshot, snapshot_version = u.snapshot_version, head_digest = u.head,
    lease_owner = CASE WHEN u.status IN ({_TERMINAL}) THEN NULL ELSE r.lease_owner END,
    lease_expires_at = {_NOW} + $3::float8
        + CASE WHEN u.status IN ({_TERMINAL}) OR r.lease_owner IS NULL THEN NULL ELSE 0 END
FROM (SELECT (c->>0)::int, (c->>1)::float8, c->>2, c->>3, (c->>4)::int, c->>5, (c->>6)::int,
             c->>7
      FROM jsonb_array_elements($1::jsonb) AS c)
     AS u(version, updated_at, status, snapshot, snapshot_version, id, expected, head)
WHERE r.id = u.id AND r.version = u.expected
  AND (r.lease_owner IS NULL OR r.lease_owner = $2::text) AND r.id = ANY($4::text[])
RETURNING r.id
"""

_NEW_COLUMNS = (
    "id, owner, status, model, background, store, previous_response_id, created_at, "
    "updated_at, version, snapshot_version, snapshot, head_digest, lease_owner, lease_expires_at"
)
_EVENT_COLUMNS = "stream_id, position, type, data, facts, recorded_at, digest"


def claim_new(rows: int) -> str:
    """The insert of `rows` new streams' rows (14 parameters each, then the lease's
    lifetime): a `VALUES` list, which Citus routes, where an insert from a `SELECT` goes
    through the coordinator. A `VALUES` row may hold a volatile function: Citus evaluates
    it before it routes the row."""
    ttl = f"${14 * rows + 1}::float8"
    values = []
    for i in range(rows):
        p = [f"${14 * i + k}" for k in range(1, 15)]
        expires = f"CASE WHEN {p[13]}::text IS NOT NULL THEN {_NOW} + {ttl} END"
        values.append(f"({', '.join(p)}, {expires})")
    return (
        f"INSERT INTO responses ({_NEW_COLUMNS}) VALUES {', '.join(values)} "
        "ON CONFLICT (id) DO NOTHING RETURNING id"
    )


def insert_events(rows: int) -> str:
    """A multi-row insert of `rows` events (seven parameters each)."""
    values = ("(" + ", ".join(f"${7 * i + k}" for k in range(1, 8)) + ")" for i in range(rows))
    return f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES {', '.join(values)}"


# What PostgreSQL allows a statement (65,535 parameters), in rows of the widest insert.
MAX_ROWS = 4000

# One stream's catch-up read (the shared one of several streams, a LATERAL join over an
# array, is refused by Citus: a LIMIT in a lateral subquery of a table function).
FETCH_ONE = """
SELECT stream_id, position, type, convert_to(data, 'UTF8'), convert_to(facts, 'UTF8'),
       recorded_at
FROM events
WHERE stream_id = $1 AND position > $2 AND resplog_period(stream_id) = resplog_period($1)
ORDER BY position
LIMIT $3
"""

SHARDS = """
SELECT s, get_shard_id_for_distribution_column('responses', s)
FROM unnest($1::text[]) AS s
"""

# Leases (leases.py): the candidates of a claim, across shards, then each taken alone.
QUEUED = f"""
SELECT id FROM responses
WHERE status = 'queued' AND (lease_owner IS NULL OR lease_expires_at < {_NOW})
ORDER BY created_at, id
LIMIT $1
"""

TAKE_QUEUED = f"""
UPDATE responses SET lease_owner = $1, lease_expires_at = {_NOW} + $2::float8
WHERE id = $3 AND status = 'queued' AND (lease_owner IS NULL OR lease_expires_at < {_NOW})
RETURNING id, cancel_reason
"""

RENEW_ONE = f"""
UPDATE responses SET lease_expires_at = {_NOW} + $2::float8
WHERE id = $3 AND lease_owner = $1
RETURNING id, cancel_reason
"""


def rows_of(values: Sequence[Sequence[Any]]) -> list[Any]:
    """The parameters of a multi-row statement: its rows' values one after the other."""
    return [v for row in values for v in row]
