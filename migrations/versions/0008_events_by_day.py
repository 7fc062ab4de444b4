"""The log partitioned by the day its streams began, so that retention drops whole days.

PostgreSQL only (SQLite keeps one table). `gc --older-than` deleted the events of every
expired response row by row: each deleted event cost about what inserting it did (WAL,
index entries), then vacuum. A log written at 30,000 events/s and kept 30 days deletes as
many events as it writes. With `events` partitioned by day, retention drops a day's table
(adapters/store/partitions.py), which costs nothing per event.

The key of the partitioning is `resplog_period(stream_id)`, an immutable function of the
stream id alone: the unix day a stream id made by `service/ids.py` carries (`resp_`, then
its second in 8 hex digits, then 42 random ones), and 0 for every other id (the random ids
made before, conversations, which no retention ends). So all the rows of a stream are in
one partition, and every read by stream that also says
`resplog_period(stream_id) = resplog_period(<id>)` reads that partition alone.

PostgreSQL refuses a primary key on a table partitioned by an expression; each partition
has its own `(stream_id, position)` key instead. Since a stream's rows are all in one
partition, that is the same guard: no two rows of a stream share a position.

What this does:
- the existing table becomes the partition `events_legacy`, holding the days up to
  tomorrow; in a new database, day 0 alone. PostgreSQL attaches a table as a partition
  without reading it when a valid `CHECK` already says its rows belong there. Adding that
  `CHECK` validated would read the whole log under a lock that stops every write (about
  5 s per million events). So it is added `NOT VALID` (a moment's lock), then validated
  in a transaction of its own, which reads the log while writes go on; only the renaming
  and the attach, which read nothing, hold the lock (docs/guides/upgrades.md). An interrupted
  run leaves the `CHECK` on `events`; the next run makes it again with a new bound;
- `events_default` takes a row whose day has no partition yet (there should be none:
  the server makes each day's partition days ahead, `partitions.ensure`); it is never
  dropped, only collected row by row like the legacy one.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Literal, not imported: a migration describes its revision, forever. SQL-language and
# immutable so that PostgreSQL inlines it (into the routing of each inserted row and into
# the pruning of each read), not STRICT (that would stop the inlining). It runs for every
# row inserted, so it is cheap: no regular expression (`~ '^resp_[0-9a-f]{50}$'` cost
# about 20 µs a row), and only the 8 digits it reads are checked to be hex (`ltrim` of
# all 50 cost 3.5 µs a row, of 8 about 0.5 µs): an id of that length and prefix whose
# first 8 digits are hex goes by them, whatever follows.
_PERIOD = r"""
CREATE OR REPLACE FUNCTION resplog_period(stream_id text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN octet_length(stream_id) = 55 AND left(stream_id, 5) = 'resp_'
                     AND ltrim(substr(stream_id, 6, 8), '0123456789abcdef') = ''
                THEN (('x' || substr(stream_id, 6, 8))::bit(32)::bigint / 86400)::integer
                ELSE 0 END
$$
"""

# Those of migration 0006 for `events`; a partitioned table has no storage of its own, so
# each partition gets them.
_EVENTS = (
    "autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.02, "
    "autovacuum_analyze_scale_factor = 0.01"
)


# How many times a step tries to take the lock that stops the log's reads and writes. Each
# try waits at most the `lock_wait` that `resplog migrate --lock-wait` passes (1 s by
# default): a lock request waiting behind a long transaction (an export) holds up every
# write queued behind it for as long, so a step gives way after that and tries again.
LOCK_TRIES = 120


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def _lock_events() -> None:
    """Take `events` for the rest of the transaction, waiting at most `lock_wait` at a time
    so that the writes queued behind this lock are held up at most that long."""
    bind = op.get_bind()
    wait_ms = max(1, round(float(context.config.attributes.get("lock_wait", 1.0)) * 1000))
    for _ in range(LOCK_TRIES):
        try:
            with bind.begin_nested():
                bind.execute(sa.text(f"SET LOCAL lock_timeout = {wait_ms}"))
                bind.execute(sa.text("LOCK TABLE events IN ACCESS EXCLUSIVE MODE"))
            return
        except sa.exc.DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) != "55P03":  # lock_not_available
                raise
        time.sleep(min(1.0, wait_ms / 1000))
    raise RuntimeError(
        f"could not lock the table events in {LOCK_TRIES} tries: a transaction holds it "
        "(pg_locks names it); run `resplog migrate` again once it has ended"
    )


def upgrade() -> None:
    if not _postgres():
        return
    # A log with events keeps every stream begun until the end of tomorrow (by this clock,
    # or by the newest response's if a host's clock was ahead) in the legacy table; a
    # response's `created_at` is the second its id carries, and the newest is one probe of
    # its index. An empty log's legacy partition holds day 0 alone (the other ids).
    bind = op.get_bind()
    newest = bind.execute(sa.text("SELECT max(created_at) FROM responses")).scalar() or 0.0
    empty = not bind.execute(sa.text("SELECT EXISTS (SELECT 1 FROM events)")).scalar()
    bound = 1 if empty else int(max(time.time(), newest) // 86400) + 2
    op.execute(_PERIOD)
    # A run interrupted after the `CHECK` was committed left it, with a bound that may be
    # past by now: it is made again.
    _lock_events()
    op.execute("ALTER TABLE events DROP CONSTRAINT IF EXISTS events_legacy_period")
    check = (
        "ALTER TABLE events ADD CONSTRAINT events_legacy_period "
        # The partition's own constraint, word for word: a bare `< bound` would not imply
        # its `IS NOT NULL` (a `CHECK` passes on NULL), and the attach would read it all again.
        f"CHECK (resplog_period(stream_id) IS NOT NULL AND resplog_period(stream_id) < {bound})"
    )
    if empty:  # nothing to read: one transaction, as any migration
        op.execute(check)
    else:
        # Until the attach, a row past the bound would be refused: the bound is tomorrow's
        # end, and the validation takes minutes, not a day.
        op.execute(f"{check} NOT VALID")
        # The block commits what came before; the validation reads the log holding SHARE
        # UPDATE EXCLUSIVE, which lets reads and writes go on.
        with op.get_context().autocommit_block():
            op.execute("ALTER TABLE events VALIDATE CONSTRAINT events_legacy_period")
        _lock_events()
    op.execute("ALTER TABLE events RENAME TO events_legacy")
    op.execute("ALTER INDEX pk_events RENAME TO pk_events_legacy")
    op.execute(
        "CREATE TABLE events (LIKE events_legacy INCLUDING DEFAULTS INCLUDING STORAGE) "
        "PARTITION BY RANGE (resplog_period(stream_id))"
    )
    # The valid `CHECK` implies the partition's bound: PostgreSQL skips reading the table.
    op.execute(
        f"ALTER TABLE events ATTACH PARTITION events_legacy FOR VALUES FROM (MINVALUE) TO ({bound})"
    )
    op.execute(f"CREATE TABLE events_default PARTITION OF events DEFAULT WITH ({_EVENTS})")
    op.execute(
        "ALTER TABLE events_default ADD CONSTRAINT pk_events_default "
        "PRIMARY KEY (stream_id, position)"
    )


def downgrade() -> None:
    if not _postgres():
        return
    others = (
        op.get_bind()
        .execute(
            sa.text(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = 'events'::regclass AND c.relname <> 'events_legacy' "
                "ORDER BY c.relname"
            )
        )
        .scalars()
    )
    op.execute("ALTER TABLE events DETACH PARTITION events_legacy")
    op.execute("ALTER TABLE events_legacy DROP CONSTRAINT events_legacy_period")
    for name in list(others):
        op.execute(f"INSERT INTO events_legacy SELECT * FROM {name}")
    op.execute("DROP TABLE events")  # and its remaining partitions
    op.execute("ALTER INDEX pk_events_legacy RENAME TO pk_events")
    op.execute("ALTER TABLE events_legacy RENAME TO events")
    op.execute("DROP FUNCTION resplog_period(text)")
