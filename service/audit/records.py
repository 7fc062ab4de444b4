"""A read-model row as the admin tools see it (every column), and the part of it that the
fold of the stream determines (what `verify` compares and `import` rebuilds)."""

from __future__ import annotations

import msgspec

from domain.events import encode_json
from domain.objects import TERMINAL_STATUSES, ResponseObject


class ResponseRecord(msgspec.Struct, frozen=True, kw_only=True):
    """Every column of one `responses` row."""

    id: str
    owner: str
    status: str
    model: str
    background: bool
    store: bool
    previous_response_id: str | None
    created_at: float
    updated_at: float
    version: int
    snapshot_version: int
    snapshot: bytes
    cancel_requested_at: float | None = None
    deleted_at: float | None = None
    lease_owner: str | None = None
    lease_expires_at: float | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class Derived(msgspec.Struct, frozen=True, kw_only=True):
    """The columns of a row that follow from its events alone (docs/storage.md)."""

    owner: str
    status: str
    model: str
    background: bool
    store: bool
    previous_response_id: str | None
    created_at: float
    version: int
    snapshot_version: int
    snapshot: ResponseObject


# The columns `verify` compares one by one; `version` is where the comparison happens and the
# snapshot is compared as an object, so neither is in the list.
COMPARED = (
    "owner",
    "status",
    "model",
    "background",
    "store",
    "previous_response_id",
    "created_at",
    "snapshot_version",
)


class Flags(msgspec.Struct, frozen=True, kw_only=True):
    """The columns of a row that no event records (export carries them, import restores)."""

    updated_at: float
    cancel_requested_at: float | None = None
    deleted_at: float | None = None
    lease_owner: str | None = None
    lease_expires_at: float | None = None


def flags_of(record: ResponseRecord) -> Flags:
    return Flags(
        updated_at=record.updated_at,
        cancel_requested_at=record.cancel_requested_at,
        deleted_at=record.deleted_at,
        lease_owner=record.lease_owner,
        lease_expires_at=record.lease_expires_at,
    )


def rebuild(stream_id: str, derived: Derived, flags: Flags) -> ResponseRecord:
    """The whole row: what the fold says plus the flags; the snapshot encoded as the store
    encodes it (`adapters/store/rows.py`)."""
    return ResponseRecord(
        id=stream_id,
        owner=derived.owner,
        status=derived.status,
        model=derived.model,
        background=derived.background,
        store=derived.store,
        previous_response_id=derived.previous_response_id,
        created_at=derived.created_at,
        updated_at=flags.updated_at,
        version=derived.version,
        snapshot_version=derived.snapshot_version,
        snapshot=encode_json(derived.snapshot),
        cancel_requested_at=flags.cancel_requested_at,
        deleted_at=flags.deleted_at,
        lease_owner=flags.lease_owner,
        lease_expires_at=flags.lease_expires_at,
    )
