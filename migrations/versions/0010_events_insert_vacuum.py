"""No vacuum of the log's partitions for their inserts alone, and a smaller `ANALYZE`.

PostgreSQL only (on SQLite there are no storage parameters: nothing to do). Migrations 0006
and 0008 gave `events` (then each of its partitions) a vacuum after every 2 % of new rows,
meant to freeze the log a slice at a time instead of in one anti-wraparound pass. Measured
with autovacuum on (docs/performance.md, "Autovacuum under a sustained load"), it does not
freeze: a vacuum freezes only rows older than `vacuum_freeze_min_age` (50 M transactions by
default), and a day's partition is written within a day, far younger. What each run did was
read every page written since the last one and write it again, to set its all-visible bit,
which nothing of resplog's reads (no query of `events` on the serving path is answered
from an index alone). That rewrite (27-31 MB/s while a run lasted, 110 s of six minutes at
30,000 events/s) put the appends' p99 up from 58 to 76 ms (medians of 28 and 40 rounds of
30 s, over five runs, each setting on a cluster of its own). The freezing it was meant for
still comes, once for each partition, when its age reaches `autovacuum_freeze_max_age`: one
partition a day, the partitions being a day each; a partition dropped by `gc` before then
is never frozen at all. Asked to freeze as it went (`autovacuum_freeze_min_age = 0`), the
same vacuum wrote a full page image to the WAL for each page (276-493 MB a run) and the p99
rose to 96 ms.

What the vacuum did serve: the hint bits it set spare a later `ANALYZE` of the partition
from setting them, under autovacuum's throttle, while it holds a snapshot that keeps the hot
row's old versions from being pruned (one run measured 5.3 s an `ANALYZE` without it and
1.2 s with it, and the hot row grew 62 MB against 27; other runs, 1.3 s and no difference).

So each partition's vacuum after inserts is off (`autovacuum_vacuum_insert_threshold = -1`),
and each of its columns gets a statistics target of 10 (the default is 100): an `ANALYZE`
samples 3,000 rows instead of 30,000, and took 0.5-0.8 s instead of 4.8-5.8 under load; the
hot row grew 21-23 MB instead of 67 and the p99 was 21-28 ms against 43-46 (two runs of 6
and 8 rounds each). Every read of the log is by stream, through the primary key, whatever the
statistics. Its vacuum after deleted rows (the legacy and default partitions' row-by-row
`gc`) is as it was. Partitions made from now on get the same
(adapters/store/partitions.py). Each partition's one `ALTER TABLE` takes its SHARE UPDATE
EXCLUSIVE lock, which lets reads and writes go on, for a moment.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Literal, not imported: a migration describes its revision, forever.
_PARTITIONS = "SELECT relid::text FROM pg_partition_tree('events') WHERE isleaf ORDER BY 1"


def _partitions() -> list[str]:
    return [row[0] for row in op.get_bind().execute(sa.text(_PARTITIONS))]


_COLUMNS = ("stream_id", "position", "type", "data", "facts", "recorded_at")


def _targets(target: int) -> str:
    return ", ".join(f"ALTER COLUMN {c} SET STATISTICS {target}" for c in _COLUMNS)


def _alter(actions: str) -> None:
    """`actions` on every partition, in one statement each (one lock taken, not three)."""
    if op.get_bind().dialect.name != "postgresql":
        return
    for name in _partitions():
        op.execute(f"ALTER TABLE {name} {actions}")


def upgrade() -> None:
    _alter(
        "SET (autovacuum_vacuum_insert_threshold = -1), "
        f"RESET (autovacuum_vacuum_insert_scale_factor), {_targets(10)}"
    )


def downgrade() -> None:
    _alter(
        "RESET (autovacuum_vacuum_insert_threshold), "
        f"SET (autovacuum_vacuum_insert_scale_factor = 0.02), {_targets(-1)}"
    )
