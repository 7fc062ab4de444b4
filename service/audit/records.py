"""Which columns of a read-model row (`ResponseRow`) the fold of its stream determines, what
`verify` compares and `import` rebuilds, and which no event records (an export carries
them beside the events)."""

from __future__ import annotations

from typing import Any

from service.ports import ResponsePage, ResponseRow

# The columns that follow from the events alone (docs/storage.md).
DERIVED = (
    "owner",
    "status",
    "model",
    "background",
    "store",
    "previous_response_id",
    "created_at",
    "version",
    "snapshot_version",
    "snapshot",
    "head_digest",
)

# The columns `verify` compares one by one; `version` is where the comparison happens and the
# snapshot is compared as an object, so neither is in the list.
# The head digest is the chain's, checked by `verify --chain` (service/audit/chain.py).
COMPARED = tuple(name for name in DERIVED if name not in ("version", "snapshot", "head_digest"))

# Every other column (but the id): the times, the cancel and delete flags, the lease. A new
# column lands here by itself, so an export must carry it (tests/unit/test_audit_views.py).
FLAGS = tuple(
    name for name in ResponseRow.__struct_fields__ if name != "id" and name not in DERIVED
)


def flags_of(row: ResponseRow) -> dict[str, Any]:
    """The columns of `row` that no event records, by name."""
    return {name: getattr(row, name) for name in FLAGS}


def listed(row: ResponseRow) -> dict[str, Any]:
    """A read-model row as `resplog responses list --json` and the audit view show it."""
    return {
        "id": row.id,
        "created_at": row.created_at,
        "status": row.status,
        "model": row.model,
        "owner": row.owner,
        "background": row.background,
        "store": row.store,
        "deleted": row.deleted,
        "cancel_requested": row.cancel_requested,
        "previous_response_id": row.previous_response_id,
        "events": row.version + 1,
    }


def listing(page: ResponsePage) -> dict[str, Any]:
    """A page of rows as `resplog responses list --json` and the audit view give it."""
    last = page.rows[-1].id if page.rows else None
    return {"data": [listed(r) for r in page.rows], "has_more": page.has_more, "last_id": last}
