"""Two partial indexes of `responses` for `gc`: the responses not stored, and those deleted
through the API, each by `(created_at, id)`.

`gc` takes an ended response that was not stored (`store: false`) or was deleted whatever
its age, and one past the retention. It looked for all three in one statement ordered by
`created_at`, which walked the `created_at` index through every ended response to find the
first two kinds, which no index held: a run that found nothing read the whole read model,
354 ms at 100 M events against a few at 1 M (docs/performance.md, "100 M events on a
partitioned log"). Each kind is now read through an index of its own; the two new ones
hold only the rows `gc` is about to delete, so they stay small.

On PostgreSQL each is built `CONCURRENTLY`, in a transaction of its own, while the
servers go on writing; a build that was interrupted leaves an invalid index, which the
next run drops and builds again.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Literal, not imported: a migration describes its revision, forever. Each predicate is
# written as the queries write it: SQLite uses a partial index only for a query whose
# condition is the index's, term for term (its `store IS false` does not serve `IS 0`).
_INDEXES = {
    "ix_responses_unstored": "store IS false",
    "ix_responses_deleted": "deleted_at IS NOT NULL",
}
_SQLITE = {**_INDEXES, "ix_responses_unstored": "store IS 0"}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        for name, where in _SQLITE.items():
            op.create_index(name, "responses", ["created_at", "id"], sqlite_where=sa.text(where))
        return
    with op.get_context().autocommit_block():
        for name, where in _INDEXES.items():
            invalid = (
                op.get_bind()
                .execute(
                    sa.text(
                        "SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c "
                        "ON c.oid = i.indexrelid WHERE c.relname = :name"
                    ),
                    {"name": name},
                )
                .scalar()
            )
            if invalid:
                op.execute(f"DROP INDEX CONCURRENTLY {name}")
            op.execute(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} "
                f"ON responses (created_at, id) WHERE {where}"
            )


def downgrade() -> None:
    for name in _INDEXES:
        op.drop_index(name, table_name="responses")
