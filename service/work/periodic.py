"""A background step run again and again: the lease renewal, the claim loop, the sweeper."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from service.work.tasks import stop_task

log = logging.getLogger("resplog")


class Periodic:
    """Runs `step` in a task of its own whenever `kick()`ed or `every()` seconds have passed
    (and once at start with `at_once`). A step that fails is logged and tried again next
    time: the usual cause is a database that is away for a while."""

    def __init__(
        self,
        name: str,
        step: Callable[[], Awaitable[object]],
        every: Callable[[], float],
        *,
        at_once: bool = False,
    ) -> None:
        self.name = name
        self._step = step
        self._every = every
        self._at_once = at_once
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def kick(self) -> None:
        """Run the step soon, without waiting for the period."""
        self._kick.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"resplog-{self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    async def _run(self) -> None:
        if self._at_once:
            await self._once()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), self._every())
            self._kick.clear()
            await self._once()

    async def _once(self) -> None:
        try:
            await self._step()
        except Exception as exc:
            log.warning("%s failed (%s); trying again", self.name, exc)
