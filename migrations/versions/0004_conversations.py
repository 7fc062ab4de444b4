"""Conversations: the read model of conversation streams (their events are in `events`).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", sa.Text, nullable=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("metadata", sa.Text, nullable=False),
        sa.Column("deleted_at", sa.Double, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_conversations"),
    )
    op.create_index(
        "ix_conversations_owner_created", "conversations", ["owner", "created_at", "id"]
    )
    op.create_table(
        "conversation_items",
        sa.Column("conversation_id", sa.Text, nullable=False),
        sa.Column("position", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("seq", sa.Integer, nullable=False, autoincrement=False),
        sa.Column("item_id", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("response_id", sa.Text, nullable=True),
        sa.Column("deleted_at", sa.Double, nullable=True),
        sa.PrimaryKeyConstraint("conversation_id", "position", "seq", name="pk_conversation_items"),
        sa.UniqueConstraint("conversation_id", "item_id", name="uq_conversation_items_item"),
    )


def downgrade() -> None:
    op.drop_table("conversation_items")
    op.drop_index("ix_conversations_owner_created", table_name="conversations")
    op.drop_table("conversations")
