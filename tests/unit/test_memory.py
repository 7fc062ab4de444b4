"""`serve` and `worker` pin glibc's mmap threshold so that freed large blocks go back to the
system (adapters/cli/memory.py; the figures are bench/stalled_bench.py's)."""

from __future__ import annotations

import ctypes.util
import platform

import pytest

from adapters.cli.memory import return_freed_memory


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_the_threshold_is_set_on_glibc() -> None:
    assert ctypes.util.find_library("c") is not None
    assert return_freed_memory() is True
