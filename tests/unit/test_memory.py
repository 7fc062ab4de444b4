"""`serve` and `worker` pin glibc's mmap threshold so that freed large blocks go back to the
system (adapters/cli/memory.py; docs/performance.md, "Stalled readers")."""

from __future__ import annotations

import ctypes.util
import gc
import platform

import pytest

from adapters.cli.memory import COLLECT_AFTER, freeze_startup_heap, return_freed_memory


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_the_threshold_is_set_on_glibc() -> None:
    assert ctypes.util.find_library("c") is not None
    assert return_freed_memory() is True


def test_the_startup_heap_is_frozen() -> None:
    """`serve` and `worker` put their startup heap out of the cyclic collector's sight
    (full collections walked it while every tail of the process waited:
    docs/performance.md)."""
    before = gc.get_freeze_count()
    thresholds = gc.get_threshold()
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() > before
        # and the young generation is collected less often than Python's default (700)
        assert gc.get_threshold() == COLLECT_AFTER
        assert COLLECT_AFTER[0] > thresholds[0]
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
