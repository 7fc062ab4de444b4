"""The work and cancel doorbells of one process: callbacks that the process's background
machinery sets, rung in-process or by the PostgreSQL listener (channels `resplog_work`,
`resplog_cancel`); payload formats of both channels.

Like the events doorbell they carry no data that matters: a work bell says "something may
be queued" (workers claim from the table), a cancel bell names responses whose row now
carries the cancel flag. Both may be lost; renewal passes and claim polls re-read the rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from domain.reasons import CancelReason

log = logging.getLogger(__name__)

WORK_CHANNEL = "resplog_work"
CANCEL_CHANNEL = "resplog_cancel"

# (response id, reason) pairs to cancel, or None: "re-check every stream you hold".
CancelFn = Callable[[list[tuple[str, CancelReason]] | None], None]
WorkFn = Callable[[], None]


def _nothing() -> None:
    pass


def _ignore(_ids: list[tuple[str, CancelReason]] | None) -> None:
    pass


def cancel_payload(owner: str, reason: CancelReason, response_id: str) -> str:
    return f"{owner}|{reason.value}|{response_id}"


def parse_cancel(payload: str) -> tuple[str, CancelReason, str] | None:
    """(lease owner, reason, response id), or None for a payload that is not one."""
    owner, sep, rest = payload.rpartition("|")
    owner, sep2, reason = owner.rpartition("|")
    if not sep or not sep2 or not owner or not rest or reason not in _REASONS:
        return None
    return owner, CancelReason(reason), rest


_REASONS = frozenset(r.value for r in CancelReason)


class Bells:
    """Where this process's doorbells ring; no-ops until `set` is called."""

    def __init__(self, owner: str | None) -> None:
        self.owner = owner
        self._work: WorkFn = _nothing
        self._cancel: CancelFn = _ignore

    def set(self, work: WorkFn, cancel: CancelFn) -> None:
        self._work, self._cancel = work, cancel

    def work(self) -> None:
        self._work()

    def cancel(self, ids: list[tuple[str, CancelReason]] | None) -> None:
        self._cancel(ids)

    def on_work_payload(self, payload: str | None, origin: str) -> None:
        """A notification on the work channel (ours were rung in-process already); a
        reconnect rings too, since bells were lost meanwhile."""
        if payload is None or payload != origin:
            self.work()

    def on_cancel_payload(self, payload: str | None) -> None:
        """A notification on the cancel channel: only the lease owner it names acts on it."""
        if payload is None:
            self.cancel(None)
            return
        parsed = parse_cancel(payload)
        if parsed is None:
            log.warning("ignoring a malformed cancel notification %r", payload)
            return
        owner, reason, response_id = parsed
        if owner == self.owner:
            self.cancel([(response_id, reason)])
