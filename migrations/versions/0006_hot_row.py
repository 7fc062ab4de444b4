"""Storage parameters for a log that grows: room on every `responses` page for the updates
of all its rows in one flush, and autovacuum that keeps up with the hot row and with `gc`.

PostgreSQL only (on SQLite there are no storage parameters: nothing to do). Measured in
docs/performance.md ("The hot row"): at fillfactor 80 a page holds about six live rows and
room for one more version, while one group-commit flush updates every running stream's row
in one statement, so most of those updates could not stay on their page (HOT) and each
left a dead tuple and new entries in all five indexes. At fillfactor 50 a page keeps at
least as much room as its rows take, enough for the next version of every one of them (a
delta's update changes no column's size), and the old versions are pruned on the next
visit. A new fillfactor applies to pages filled from now on; rows already written keep
theirs (`VACUUM FULL responses` would rewrite them, under an exclusive lock: not needed,
since the rows that are updated are the new ones).

Autovacuum by a fixed number of changed rows rather than by a share of the table (the
default, 20 %, waits for 20 M dead rows in a table of 100 M): `responses` is vacuumed after
about 2,000 updated or deleted rows that could not be pruned away, and its statistics (the
planner's idea of the newest `created_at`, which the listings of recent responses read) are
refreshed as often; `events` (append-only, shrunk only by `gc`) is vacuumed after 1 % of it
changed, so that a `gc` run's dead rows are reclaimed before the next one, and after 2 % new
rows, which freezes it a slice at a time instead of in one anti-wraparound pass.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Literal values, not imported: a migration describes its revision, forever.
_RESPONSES = {
    "fillfactor": "50",
    "autovacuum_vacuum_scale_factor": "0",
    "autovacuum_vacuum_threshold": "2000",
    "autovacuum_analyze_scale_factor": "0",
    "autovacuum_analyze_threshold": "2000",
}
_EVENTS = {
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_insert_scale_factor": "0.02",
    "autovacuum_analyze_scale_factor": "0.01",
}


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    if not _postgres():
        return
    for table, options in (("responses", _RESPONSES), ("events", _EVENTS)):
        settings = ", ".join(f"{k} = {v}" for k, v in options.items())
        op.execute(f"ALTER TABLE {table} SET ({settings})")


def downgrade() -> None:
    if not _postgres():
        return
    op.execute("ALTER TABLE responses SET (fillfactor = 80)")
    op.execute(
        f"ALTER TABLE responses RESET ({', '.join(k for k in _RESPONSES if k != 'fillfactor')})"
    )
    op.execute(f"ALTER TABLE events RESET ({', '.join(_EVENTS)})")
