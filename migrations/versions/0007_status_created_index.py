"""Responses by status, newest first: the `status` index becomes `(status, created_at, id)`.

`responses list --status X --since T` read the old index for every row of that status and
sorted them, so the listing grew with the log (10 M events: 1.87 times its 1 M time,
docs/performance.md "The log at 1 M, 10 M and 100 M events"); the new index is a range scan in
the listing's order. Everything that used the old one (`gc`'s
terminal statuses, the sweeper's running ones) uses its leading column the same way.

On PostgreSQL the build locks `responses` against writes while it runs: a few seconds for
the read model of 100 M events (about 300,000 rows); do it outside the busiest hour.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_responses_status_created", "responses", ["status", "created_at", "id"])
    op.drop_index("ix_responses_status", table_name="responses")


def downgrade() -> None:
    op.create_index("ix_responses_status", "responses", ["status"])
    op.drop_index("ix_responses_status_created", table_name="responses")
