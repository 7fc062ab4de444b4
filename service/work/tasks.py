"""Ending a background task of this process: cancel it and wait until it is gone."""

from __future__ import annotations

import asyncio
import contextlib


async def stop_task(task: asyncio.Task[None] | None) -> None:
    """Cancel `task` (if any) and wait for it; its cancellation is how it ends, not an
    error, while any other exception it ends with is raised here."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
