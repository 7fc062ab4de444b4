"""The hash chain of prompt template streams: the head digest on each template's row, and
the digests of the versions written before their writer linked them, backfilled.

A template's versions are events of the log like any other's, chained as migration 0011
chained the streams it found (which came before templates did): each digest from the bytes
a reader receives, the blobs put back, and the previous digest. The backfill reads only
the templates' streams, whose events no erasure rewrites, and is that revision's code.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The chain and the blob references as revision 0011 wrote them (it holds their literal
# definitions, forever); not the live code, which a later revision may change.
_chained = importlib.import_module("migrations.versions.0011_hash_chain")


def _backfill(conn: sa.Connection) -> None:
    ids = [row[0] for row in conn.execute(sa.text("SELECT id FROM prompts ORDER BY id"))]
    read = sa.text(
        "SELECT position, type, data, facts FROM events WHERE stream_id = :s ORDER BY position"
    )
    update = sa.text("UPDATE events SET digest = :d WHERE stream_id = :s AND position = :p")
    for sid in ids:
        previous, changes = _chained._GENESIS, []
        for position, type_, data, facts in conn.execute(read, {"s": sid}):
            content = _chained._content(
                _chained._resolved(conn, data) or b"", _chained._resolved(conn, facts)
            )
            previous = _chained._link(previous, sid, position, type_, content)
            changes.append({"d": previous.hex(), "s": sid, "p": position})
        if changes:
            conn.execute(update, changes)
            conn.execute(
                sa.text("UPDATE prompts SET head_digest = :d WHERE id = :s"),
                {"d": previous.hex(), "s": sid},
            )


def upgrade() -> None:
    op.add_column("prompts", sa.Column("head_digest", sa.Text, nullable=True))
    _backfill(op.get_bind())


def downgrade() -> None:
    op.drop_column("prompts", "head_digest")
