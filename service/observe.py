"""What a process's generations and background work report to whoever watches them: the
metrics (adapters/metrics) and, when configured, the traces (adapters/otel). Two small ports
and their do-nothing defaults, so that the use-cases never import a telemetry library and
cost nothing when nobody watches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from domain.events import AnyEvent
from domain.state import ResponseState


class WorkObserver(Protocol):
    """The background machinery's moments (metrics). Every argument is from a closed set:
    no response id, so that a metric's labels stay bounded."""

    def claimed(self, count: int) -> None:
        """This process claimed `count` queued responses (their leases)."""

    def lease_lost(self) -> None:
        """A lease this process held was taken over (found at a renewal, or by the store's
        guard refusing the generation's append); its generation stops."""

    def swept(self, action: str) -> None:
        """The sweeper acted on an expired lease: `ended` (failed `worker_lost`),
        `cancelled` (a cancel was asked meanwhile), `resumed` (a tool loop taken over)."""

    def engine_failed(self, code: str) -> None:
        """A generation ended on an `EngineError` with this `code`."""


class GenerationTrace(Protocol):
    """One generation's trace: told of each append of it that committed, then ended."""

    def committed(self, began_ns: int, events: Sequence[AnyEvent], state: ResponseState) -> None:
        """`events` are durable; their append began at `began_ns` (unix nanoseconds), and
        `state` is the response after them."""

    def end(self, state: ResponseState, error: str | None) -> None:
        """The generation is over; `error` is why it failed (an engine's code, a reason)."""


class Tracer(Protocol):
    """Starts a generation's trace, under whatever span is current (the create request's,
    when the generation was launched by it: a task inherits its creator's context)."""

    def generation(self, response_id: str, model: str) -> GenerationTrace: ...


class Unobserved:
    """Nobody watches: every report is dropped (the default)."""

    def claimed(self, count: int) -> None:
        pass

    def lease_lost(self) -> None:
        pass

    def swept(self, action: str) -> None:
        pass

    def engine_failed(self, code: str) -> None:
        pass

    def generation(self, response_id: str, model: str) -> GenerationTrace:
        return self

    def committed(self, began_ns: int, events: Sequence[AnyEvent], state: ResponseState) -> None:
        pass

    def end(self, state: ResponseState, error: str | None) -> None:
        pass


UNOBSERVED = Unobserved()
