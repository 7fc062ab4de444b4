"""Blobs: the images and files of requests, content-addressed, stored once.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.Text, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("used_at", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint("sha256", name="pk_blobs"),
    )


def downgrade() -> None:
    op.drop_table("blobs")
