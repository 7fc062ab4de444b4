"""Prompt templates: the read model of prompt streams (their versions are in `events`).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "prompts",
        sa.Column("id", sa.Text, nullable=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_prompts"),
    )
    op.create_index("ix_prompts_owner_updated", "prompts", ["owner", "updated_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_prompts_owner_updated", table_name="prompts")
    op.drop_table("prompts")
