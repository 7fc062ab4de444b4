"""The tables of the store, as SQLAlchemy Core: the event log, the response read model and
the API keys; and the one mapping between a `responses` row and the port's `ResponseRow`.

They are identical on PostgreSQL and SQLite and are created only by the Alembic migrations
(`migrations/versions/`); this module describes them for the queries and must match them.
Adding a column to `responses` is this table, the field of `ResponseRow`, and a migration.
"""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa

from domain.reasons import CancelReason
from service.ports import ResponseRow

metadata = sa.MetaData()

# `data` is TEXT, not jsonb: jsonb normalises the document (key order, whitespace, duplicate
# keys), and the log promises a replay of exactly the bytes a live client received.
# `(stream_id, position)` is the primary key and therefore the concurrency guard of last
# resort: two writers can never both own a position.
events = sa.Table(
    "events",
    metadata,
    sa.Column("stream_id", sa.Text, primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Column("facts", sa.Text, nullable=True),
    sa.Column("recorded_at", sa.Double, nullable=False),
    # The event's link in its stream's hash chain (hex; `domain/chain.py`), written with it
    # (migration 0011 backfilled the older ones). `content_digest` is NULL until the event
    # is erased: the content digest is then kept here, the bytes being gone, so the link
    # can still be checked (adapters/store/erase.py).
    sa.Column("digest", sa.Text, nullable=True),
    sa.Column("content_digest", sa.Text, nullable=True),
)

# On PostgreSQL `events` is partitioned by the day its streams began (migration 0008,
# partitions.py): its partitions are not tables of their own for the queries, nor for
# Alembic's comparison of this module with the database (`described`).
_PARTITION = re.compile(r"events_(legacy|default|p\d+)")


def described(name: str | None, type_: str, parent_names: object) -> bool:
    """Alembic's `include_name`: every table but the partitions of `events`."""
    return not (type_ == "table" and name is not None and _PARTITION.fullmatch(name))


# One row per stream, updated in the transaction that appends to the stream. `version` is the
# last position; the append guard is `UPDATE ... WHERE version = expected_version`, which
# also catches an expected version that is too high (the primary key alone would accept it
# and leave a hole). The fill factor (migration 0006) leaves room on each page for the next
# versions of all its rows, which one flush updates together, so that the per-flush update of
# `version`/`updated_at` (no indexed column changes) stays a HOT update.
responses = sa.Table(
    "responses",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
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
    # Why the cancel was asked for (a `CancelReason`), set with `cancel_requested_at`: the
    # lease owner that finds the flag by polling (its doorbell lost) ends it with this.
    sa.Column("cancel_reason", sa.Text, nullable=True),
    sa.Column("deleted_at", sa.Double, nullable=True),
    sa.Column("lease_owner", sa.Text, nullable=True),
    sa.Column("lease_expires_at", sa.Double, nullable=True),
    # The digest of the stream's last event (`version`), moved with it by every append.
    sa.Column("head_digest", sa.Text, nullable=True),
    sa.Index("ix_responses_owner_created", "owner", "created_at", "id"),
    sa.Index("ix_responses_created", "created_at", "id"),
    sa.Index("ix_responses_status_created", "status", "created_at", "id"),
    sa.Index("ix_responses_previous", "previous_response_id"),
    postgresql_with={"fillfactor": 50},
)
# What `gc` takes whatever its age (migration 0009): the responses not stored, and those
# deleted through the API. Each holds only such rows, which `gc` deletes, so each stays
# small however long the log, and `gc` finds them without reading every response.
for _name, _where in (
    ("ix_responses_unstored", responses.c.store.is_(False)),
    ("ix_responses_deleted", responses.c.deleted_at.is_not(None)),
):
    sa.Index(
        _name, responses.c.created_at, responses.c.id, postgresql_where=_where, sqlite_where=_where
    )


def row_of(row: sa.Row[Any]) -> ResponseRow:
    """The `ResponseRow` of a selected `responses` row (all of its columns)."""
    m = row._mapping
    values = {name: m[name] for name in ResponseRow.__struct_fields__}
    values["background"] = bool(values["background"])  # SQLite may hand back 0/1
    values["store"] = bool(values["store"])
    values["snapshot"] = values["snapshot"].encode()
    reason = values["cancel_reason"]
    values["cancel_reason"] = None if reason is None else CancelReason(reason)
    return ResponseRow(**values)


def values_of(row: ResponseRow) -> dict[str, Any]:
    """The column values of `row`, as the table stores them (the inverse of `row_of`)."""
    values = {name: getattr(row, name) for name in ResponseRow.__struct_fields__}
    values["snapshot"] = row.snapshot.decode()
    values["cancel_reason"] = None if row.cancel_reason is None else row.cancel_reason.value
    return values


# API keys: only a SHA-256 of each secret (service/access/keys.py says why that is
# enough), unique so that a lookup by hash is one index probe. `prefix` is the secret's
# first characters, shown in lists so that an operator can tell keys apart. A revoked key
# is kept (its row says who owned it and when it stopped working), never deleted.
api_keys = sa.Table(
    "api_keys",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("key_hash", sa.Text, nullable=False, unique=True),
    sa.Column("prefix", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("revoked_at", sa.Double, nullable=True),
    sa.Index("ix_api_keys_owner", "owner"),
)


# A conversation (the Conversations API) is a stream of the log like a response: its events
# (`conversation.created`, `conversation.items.added`, `conversation.item.deleted`,
# `conversation.updated`, `conversation.deleted`) are rows of `events` under its id
# (`conv_…`), and these two tables are its read model, written in the same transaction:
# the conversation's row (`version` is its stream's last position, the append guard) and
# one row per item in the conversation's order (`position` of the event that added it,
# `seq` within that event). A deleted item or conversation is flagged, never removed.
conversations = sa.Table(
    "conversations",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("metadata", sa.Text, nullable=False),
    sa.Column("deleted_at", sa.Double, nullable=True),
    sa.Column("head_digest", sa.Text, nullable=True),  # as `responses.head_digest`
    sa.Index("ix_conversations_owner_created", "owner", "created_at", "id"),
)

conversation_items = sa.Table(
    "conversation_items",
    metadata,
    sa.Column("conversation_id", sa.Text, primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("item_id", sa.Text, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Column("response_id", sa.Text, nullable=True),
    sa.Column("deleted_at", sa.Double, nullable=True),
    sa.UniqueConstraint("conversation_id", "item_id", name="uq_conversation_items_item"),
)


# A prompt template (domain/templates.py) is a stream of the log like a conversation: its
# versions are `prompt.version.added` rows of `events` under its id (`pmpt_…`), version N at
# position N - 1, and this is its read model, written in the same transaction: who owns it
# and its latest version (`version`, the append guard, as a conversation's). Nothing is
# ever deleted: a response names the version it used, which must stay readable.
prompts = sa.Table(
    "prompts",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("head_digest", sa.Text, nullable=True),  # as `responses.head_digest`
    sa.Index("ix_prompts_owner_updated", "owner", "updated_at", "id"),
)


# The images and files of requests (`input_image` data URLs, `input_file` file data) over a
# few KiB, stored once whatever the number of requests that carry them (a `store: false`
# client resends its whole history each turn). The key is the SHA-256 (hex) of `data`, the
# data URL exactly as the request's facts held it (JSON-escaped text), so that putting it
# back gives the facts' bytes (`adapters/store/blobs.py`). `used_at` is bumped by every
# request that stores it again, so `gc` never deletes one a concurrent request is reusing.
blobs = sa.Table(
    "blobs",
    metadata,
    sa.Column("sha256", sa.Text, primary_key=True),
    sa.Column("data", sa.Text, nullable=False),
    sa.Column("size", sa.Integer, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("used_at", sa.Double, nullable=False),
)


# Signed checkpoints of the log (`serve --checkpoint-every-s`; service/audit/checkpoint.py):
# the checkpoint's file as `resplog checkpoint` writes it, kept whole.
checkpoints = sa.Table(
    "checkpoints",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("root", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),
)

# The erasures (`resplog erase`): which stream, when and why; never what was erased.
erasures = sa.Table(
    "erasures",
    metadata,
    sa.Column("stream_id", sa.Text, primary_key=True),
    sa.Column("erased_at", sa.Double, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
)

# How many times a response left the chains it was part of (deleted, or erased): one row,
# whose count the cache of `previous_response_id` histories checks its entries by
# (service/prompts/chains.py; migration 0014).
chain_breaks = sa.Table(
    "chain_breaks",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("breaks", sa.BigInteger, nullable=False),
)
BREAK = sa.update(chain_breaks).values(breaks=chain_breaks.c.breaks + 1)

# Webhooks (service/webhooks/, migration 0012). An owner's endpoints: the URL, the event
# types it hears (`events`, comma-framed: `,response.completed,response.failed,`, so that one
# `LIKE` tells whether it hears a type, the same on both databases), its signing secret and,
# for the grace period of a rotation, the one before it, both sealed under the server's key
# (adapters/sealing/aesgcm.py, as the headers of `mcp` tools are). A removed endpoint keeps
# its row (`status` removed): its deliveries and their attempts still name it.
webhook_endpoints = sa.Table(
    "webhook_endpoints",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("events", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("secret_sealed", sa.Text, nullable=False),
    sa.Column("previous_sealed", sa.Text, nullable=True),
    sa.Column("previous_until", sa.Double, nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    # Since when every attempt to it has failed (None: its last attempt succeeded).
    sa.Column("failing_since", sa.Double, nullable=True),
    sa.Column("disabled_reason", sa.Text, nullable=True),
    sa.Index("ix_webhook_endpoints_owner", "owner", "status"),
)

# What happened to each endpoint, in order: added, disabled (by whom, why), enabled,
# secret rotated, removed. Never updated or deleted.
webhook_endpoint_log = sa.Table(
    "webhook_endpoint_log",
    metadata,
    sa.Column("endpoint_id", sa.Text, primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("at", sa.Double, nullable=False),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("detail", sa.Text, nullable=True),
)

# One delivery per endpoint and response, inserted in the transaction that appends the
# response's terminal event (adapters/store/webhooks.py `enqueue`), so none is lost between
# the two. `status`: pending, delivered, or expired (it failed until `--webhook-max-age-h`).
# A pending one is leased to the process attempting it (`lease_owner`, `lease_expires_at`),
# like a background response's row; the lease covers one attempt.
webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column("endpoint_id", sa.Text, primary_key=True),
    sa.Column("response_id", sa.Text, primary_key=True),
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
    sa.Index("ix_webhook_deliveries_due", "status", "endpoint_id", "next_attempt_at"),
    sa.Index("ix_webhook_deliveries_response", "response_id"),
)

# Every attempt of every delivery: when, by which process, the HTTP status (None: no answer),
# how long it took, and what went wrong.
webhook_attempts = sa.Table(
    "webhook_attempts",
    metadata,
    sa.Column("endpoint_id", sa.Text, primary_key=True),
    sa.Column("response_id", sa.Text, primary_key=True),
    sa.Column("number", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("started_at", sa.Double, nullable=False),
    sa.Column("latency_s", sa.Double, nullable=False),
    sa.Column("status_code", sa.Integer, nullable=True),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("worker", sa.Text, nullable=False),
)
