"""`verify --all --jobs N`: what the parent makes of its parts' messages when one fails."""

from __future__ import annotations

import multiprocessing
import os
from typing import Any

import pytest

from adapters.cli.output import Bar
from adapters.cli.verify import Report, _gather
from domain.errors import ResplogError


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
