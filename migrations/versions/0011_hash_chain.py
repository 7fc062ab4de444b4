"""The hash chain of every stream: a digest per event and the head digest on each stream's
row, backfilled for the log already written; the tables of signed checkpoints and of
erasures.

Each event's digest commits to its stream, position, type, content and the previous
event's digest (`domain/chain.py`); the writer computes it from here on as it appends. The
backfill reads each stream in position order (its blobs put back: the content digest is of
the bytes a reader receives) and writes the digests, a page of rows at a time, then each
row's head. It reads and rewrites every event once: on a large log, run it while the
servers are stopped (docs/guides/auditing.md, "Upgrading a log").

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PAGE = 2000

# Literal, not imported: a migration describes its revision, forever. The chain as
# domain/chain.py defines it, and the blob references as adapters/store/blobs.py writes
# them (a reference is put back as the data URL, a JSON string, or the part, a JSON value).
_GENESIS = bytes(32)
_REF = re.compile(r'([{,]"(image_url|file_data|schema|parameters)":)blob:sha256:([0-9a-f]{64})')
_STRINGS = frozenset({"image_url", "file_data"})


def _content(data: bytes, facts: bytes | None) -> bytes:
    h = hashlib.sha256(b"%d:" % len(data))
    h.update(data)
    if facts is None:
        h.update(b"-")
    else:
        h.update(b"%d:" % len(facts))
        h.update(facts)
    return h.digest()


def _link(previous: bytes, stream_id: str, position: int, type_: str, content: bytes) -> bytes:
    text = b"%b%b%d\x00%b\x00%b" % (previous, content, position, type_.encode(), stream_id.encode())
    return hashlib.sha256(text).digest()


def put_back(text: str, found: Mapping[str, str]) -> str:
    def swap(match: re.Match[str]) -> str:
        body = found.get(match.group(3))
        if body is None:
            return match.group(0)
        return f'{match.group(1)}"{body}"' if match.group(2) in _STRINGS else match.group(1) + body

    return _REF.sub(swap, text)


def references(text: str) -> set[str]:
    return {m.group(3) for m in _REF.finditer(text)} if "blob:sha256:" in text else set()


def _resolved(conn: sa.Connection, text: str | None) -> bytes | None:
    if text is None:
        return None
    wanted = references(text)
    if not wanted:
        return text.encode()
    rows = conn.execute(
        sa.text("SELECT sha256, data FROM blobs WHERE sha256 IN :keys").bindparams(
            sa.bindparam("keys", expanding=True)
        ),
        {"keys": sorted(wanted)},
    )
    return put_back(text, {k: v for k, v in rows}).encode()


def _backfill(conn: sa.Connection) -> None:
    page = sa.text(
        "SELECT stream_id, position, type, data, facts FROM events "
        "WHERE (stream_id, position) > (:sid, :pos) ORDER BY stream_id, position LIMIT :n"
    )
    first = sa.text(
        "SELECT stream_id, position, type, data, facts FROM events "
        "ORDER BY stream_id, position LIMIT :n"
    )
    update = sa.text("UPDATE events SET digest = :d WHERE stream_id = :s AND position = :p")
    heads: dict[str, str] = {}
    previous, at = _GENESIS, ("", -1)
    rows = conn.execute(first, {"n": _PAGE}).all()
    while rows:
        changes = []
        for sid, position, type_, data, facts in rows:
            if sid != at[0]:
                previous = _GENESIS
            body = _resolved(conn, data) or b""
            content = _content(body, _resolved(conn, facts))
            previous = _link(previous, sid, position, type_, content)
            heads[sid] = previous.hex()
            changes.append({"d": heads[sid], "s": sid, "p": position})
            at = (sid, position)
        conn.execute(update, changes)
        rows = conn.execute(page, {"sid": at[0], "pos": at[1], "n": _PAGE}).all()
    if not heads:
        return
    for table in ("responses", "conversations"):
        conn.execute(
            sa.text(f"UPDATE {table} SET head_digest = :d WHERE id = :s"),
            [{"d": d, "s": s} for s, d in heads.items()],
        )


def upgrade() -> None:
    op.add_column("events", sa.Column("digest", sa.Text, nullable=True))
    op.add_column("events", sa.Column("content_digest", sa.Text, nullable=True))
    op.add_column("responses", sa.Column("head_digest", sa.Text, nullable=True))
    op.add_column("conversations", sa.Column("head_digest", sa.Text, nullable=True))
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("root", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_table(
        "erasures",
        sa.Column("stream_id", sa.Text, primary_key=True),
        sa.Column("erased_at", sa.Double, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
    )
    _statistics()
    _backfill(op.get_bind())


def _statistics() -> None:
    """The new columns sample as few rows as the others (migration 0010)."""
    conn = op.get_bind()
    if conn.dialect.name != "postgresql":
        return
    leaves = "SELECT relid::text FROM pg_partition_tree('events') WHERE isleaf ORDER BY 1"
    for (name,) in conn.execute(sa.text(leaves)):
        op.execute(
            f"ALTER TABLE {name} ALTER COLUMN digest SET STATISTICS 10, "
            "ALTER COLUMN content_digest SET STATISTICS 10"
        )


def downgrade() -> None:
    op.drop_table("erasures")
    op.drop_table("checkpoints")
    op.drop_column("conversations", "head_digest")
    op.drop_column("responses", "head_digest")
    op.drop_column("events", "content_digest")
    op.drop_column("events", "digest")
