"""Webhooks: endpoints per owner, their change log, deliveries and every attempt
(adapters/store/tables.py describes them; service/webhooks/ uses them).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.Text, nullable=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("events", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("secret_sealed", sa.Text, nullable=False),
        sa.Column("previous_sealed", sa.Text, nullable=True),
        sa.Column("previous_until", sa.Double, nullable=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
        sa.Column("failing_since", sa.Double, nullable=True),
        sa.Column("disabled_reason", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_endpoints"),
    )
    op.create_index("ix_webhook_endpoints_owner", "webhook_endpoints", ["owner", "status"])
    op.create_table(
        "webhook_endpoint_log",
        sa.Column("endpoint_id", sa.Text, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("at", sa.Double, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("detail", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("endpoint_id", "seq", name="pk_webhook_endpoint_log"),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("endpoint_id", sa.Text, nullable=False),
        sa.Column("response_id", sa.Text, nullable=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("event_type", sa.Text, nullable=False),
        sa.Column("event_at", sa.Double, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", sa.Double, nullable=False),
        sa.Column("delivered_at", sa.Double, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("lease_owner", sa.Text, nullable=True),
        sa.Column("lease_expires_at", sa.Double, nullable=True),
        sa.PrimaryKeyConstraint("endpoint_id", "response_id", name="pk_webhook_deliveries"),
    )
    op.create_index(
        "ix_webhook_deliveries_due",
        "webhook_deliveries",
        ["status", "endpoint_id", "next_attempt_at"],
    )
    op.create_index("ix_webhook_deliveries_response", "webhook_deliveries", ["response_id"])
    op.create_table(
        "webhook_attempts",
        sa.Column("endpoint_id", sa.Text, nullable=False),
        sa.Column("response_id", sa.Text, nullable=False),
        sa.Column("number", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("latency_s", sa.Double, nullable=False),
        sa.Column("status_code", sa.Integer, nullable=True),
        sa.Column("outcome", sa.Text, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("worker", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("endpoint_id", "response_id", "number", name="pk_webhook_attempts"),
    )


def downgrade() -> None:
    op.drop_table("webhook_attempts")
    op.drop_index("ix_webhook_deliveries_response", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_due", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_endpoint_log")
    op.drop_index("ix_webhook_endpoints_owner", table_name="webhook_endpoints")
    op.drop_table("webhook_endpoints")
