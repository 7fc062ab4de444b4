"""The chain-break count: how many times a response (or its content) left the chains it was
part of, by a delete, an erasure or `gc`; what a process's cache of `previous_response_id`
histories checks its entries by (service/prompts/chains.py).

The count is a stamp, not content: a process's cache starts empty, so any starting value is
right, and the backfill is 0; it must only grow whenever a response that a chain may hold
is deleted, erased or collected.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    table = op.create_table(
        "chain_breaks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("breaks", sa.BigInteger, nullable=False),
    )
    op.bulk_insert(table, [{"id": 1, "breaks": 0}])


def downgrade() -> None:
    op.drop_table("chain_breaks")
