"""`verify --all --jobs N`: what the parent makes of its parts' messages when one fails."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
from typing import Any

import pytest

from adapters.cli.output import Bar
from adapters.cli.verify import _gather, exit_with_parent
from domain.errors import ResplogError
from service.audit.verifying import Report


async def test_a_part_that_ends_without_its_report_fails_the_run() -> None:
    """Killed, or out of memory: the run stops with the exit code, instead of waiting."""
    context = multiprocessing.get_context("spawn")
    out: Any = context.Queue()
    proc = context.Process(target=os._exit, args=(3,))
    proc.start()
    proc.join()
    with pytest.raises(ResplogError, match=r"ended without its report \(exit code 3\)"):
        await _gather(out, [proc], Bar("verifying", None, False), None)


async def test_a_part_that_could_not_finish_fails_the_run_with_its_reason() -> None:
    context = multiprocessing.get_context("spawn")
    out: Any = context.Queue()
    proc = context.Process(target=os.getpid)
    proc.start()
    proc.join()
    out.put(("progress", 2, 40))
    out.put(("failed", "cannot use the database: connection refused"))
    with pytest.raises(ResplogError, match=r"^cannot use the database: connection refused$"):
        await _gather(out, [proc], Bar("verifying", None, False), None)


async def test_the_parts_reports_come_back_in_the_order_of_their_slices() -> None:
    context = multiprocessing.get_context("spawn")
    out: Any = context.Queue()
    procs = [context.Process(target=os.getpid) for _ in range(2)]
    for proc in procs:
        proc.start()
        proc.join()
    out.put(("done", 1, Report(streams=2, events=20)))
    out.put(("done", 0, Report(streams=1, events=10)))
    got = await _gather(out, procs, Bar("verifying", None, False), None)
    assert [(r.streams, r.events) for r in got] == [(1, 10), (2, 20)]


def _part_that_waits() -> None:
    async def wait() -> None:
        exit_with_parent()
        await asyncio.sleep(60)

    asyncio.run(wait())


def _parent_of_a_part(out: Any) -> None:
    part = multiprocessing.get_context("spawn").Process(target=_part_that_waits, daemon=True)
    part.start()
    out.put(part.pid)
    time.sleep(60)


def test_a_part_ends_when_its_parent_is_killed() -> None:
    """`kill -9` of `verify --all --jobs N` must not leave its parts reading on."""
    context = multiprocessing.get_context("spawn")
    out: Any = context.Queue()
    parent = context.Process(target=_parent_of_a_part, args=(out,))
    parent.start()
    part = out.get(timeout=30)
    time.sleep(1.0)  # the part's loop is watching by now
    os.kill(part, 0)  # alive while its parent is
    assert parent.pid is not None
    os.kill(parent.pid, signal.SIGKILL)
    parent.join()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(part, 0)
        except ProcessLookupError:
            return
        # a zombie until init reaps it: count a process that has exited as gone
        with open(f"/proc/{part}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                return
        time.sleep(0.1)
    os.kill(part, signal.SIGKILL)
    raise AssertionError("the part outlived its parent by 10 s")
