"""The reason of a cancel request, stored with its flag (`responses.cancel_reason`).

Before it, a lease owner that found the flag by polling (its doorbell lost) could only
guess the reason from the delete flag. Rows flagged then get that same guess.

Revision ID: 0003
Revises: 0002
Create Date: 2025-03-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("responses", sa.Column("cancel_reason", sa.Text, nullable=True))
    # Literal values, not `domain.reasons`: a migration describes its revision, forever.
    op.execute(
        "UPDATE responses SET cancel_reason = CASE WHEN deleted_at IS NOT NULL "
        "THEN 'deleted' ELSE 'cancelled_by_user' END "
        "WHERE cancel_requested_at IS NOT NULL"
    )


def downgrade() -> None:
    # Batch mode: SQLite rebuilds the table (with its indexes) to drop a column.
    with op.batch_alter_table("responses") as batch:
        batch.drop_column("cancel_reason")
