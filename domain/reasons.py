"""Why resplog itself ends a response early: the `reason` its cancelled or failed event
records (an operator-only fact), and the reason a cancel flag carries on the row.

The values are stored in logs and rows: never change one, only add.
"""

from __future__ import annotations

from enum import StrEnum


class CancelReason(StrEnum):
    """Why a running (or queued) response is stopped; it ends `cancelled` with this reason.

    The first two can be asked for by another process (they ride on the row's cancel flag
    and the cancel doorbell); the others are decided by the process that runs it.
    """

    CANCELLED_BY_USER = "cancelled_by_user"  # POST /v1/responses/{id}/cancel
    DELETED = "deleted"  # DELETE /v1/responses/{id} of one that still runs
    CLIENT_DISCONNECTED = "client_disconnected"  # a plain streaming client went away
    LEASE_LOST = "lease_lost"  # another process took its expired lease over


class FailReason(StrEnum):
    """Why resplog (not the engine: its errors carry their own code) ends a response
    `failed`. Kept apart from `CancelReason` so that a cancel cannot be asked for with one."""

    SERVER_SHUTDOWN = "server_shutdown"  # the process stopped before it finished
    WORKER_LOST = "worker_lost"  # its process is gone (the sweeper found its lease expired)
    PROMPT_UNAVAILABLE = "prompt_unavailable"  # its conversation can no longer be loaded
    INTERNAL_ERROR = "internal_error"  # a bug: the runner crashed
