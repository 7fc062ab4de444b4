"""`serve` and `worker` pin glibc's mmap threshold so that freed large blocks go back to the
system (adapters/cli/memory.py; the figures are bench/stalled_bench.py's)."""

from __future__ import annotations

import ctypes.util
import gc
import platform

import pytest

from adapters.cli.memory import return_freed_memory


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_the_threshold_is_set_on_glibc() -> None:
    assert ctypes.util.find_library("c") is not None
    assert return_freed_memory() is True


def test_serve_freezes_its_startup_heap() -> None:
    """`serve` puts its startup heap out of the cyclic collector's sight (full collections
    walked it while every tail of the process waited: docs/performance.md)."""
    from adapters.cli.server import freeze_startup_heap

    before = gc.get_freeze_count()
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
