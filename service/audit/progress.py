"""What the audit's long use-cases report as they go (the CLI shows it as a progress bar):
streams and events done, opened once the total is known."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol


class Progress(Protocol):
    def stream(self, n: int = 1) -> None: ...

    def event(self, n: int = 1) -> None: ...

    def done(self) -> None:
        """Everything counted: show the final figures."""
        ...


# Opens the progress of a run of so many streams (None: not known ahead).
Opener = Callable[[int | None], AbstractContextManager[Progress]]
