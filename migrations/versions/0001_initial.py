"""The event log and the response read model.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Written out in full rather than imported from adapters/store/tables.py: a migration
    # describes the schema as of its revision, forever.
    op.create_table(
        "events",
        sa.Column("stream_id", sa.Text, nullable=False),
        sa.Column("position", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("facts", sa.Text, nullable=True),
        sa.Column("recorded_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("stream_id", "position", name="pk_events"),
    )
    op.create_table(
        "responses",
        sa.Column("id", sa.Text, nullable=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("background", sa.Boolean, nullable=False),
        sa.Column("store", sa.Boolean, nullable=False),
        sa.Column("previous_response_id", sa.Text, nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("snapshot_version", sa.Integer, nullable=False),
        sa.Column("snapshot", sa.Text, nullable=False),
        sa.Column("cancel_requested_at", sa.Double, nullable=True),
        sa.Column("deleted_at", sa.Double, nullable=True),
        sa.Column("lease_owner", sa.Text, nullable=True),
        sa.Column("lease_expires_at", sa.Double, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_responses"),
        postgresql_with={"fillfactor": 80},
    )
    op.create_index("ix_responses_owner_created", "responses", ["owner", "created_at", "id"])
    op.create_index("ix_responses_created", "responses", ["created_at", "id"])
    op.create_index("ix_responses_status", "responses", ["status"])
    op.create_index("ix_responses_previous", "responses", ["previous_response_id"])


def downgrade() -> None:
    op.drop_index("ix_responses_previous", table_name="responses")
    op.drop_index("ix_responses_status", table_name="responses")
    op.drop_index("ix_responses_created", table_name="responses")
    op.drop_index("ix_responses_owner_created", table_name="responses")
    op.drop_table("responses")
    op.drop_table("events")
