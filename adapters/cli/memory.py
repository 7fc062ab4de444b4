"""The long-running processes' (`serve`, `worker`) memory: freed memory given back to the
system, and the startup heap kept out of the cyclic collector's way, which runs less often
(`freeze_startup_heap`).

glibc serves a large allocation with its own mmap, which goes back to the system when
freed, but it raises that threshold to the size of every such block freed (up to 32 MiB),
so after the first large event has come and gone, blocks of that size come from the heap,
where freed memory mostly stays with the process. A server that replays megabyte events to
many clients then keeps its peak for good: 256 stalled readers of a 4.5 MiB response
left +1.2 GiB after they closed. Fixing the threshold
at glibc's default start (128 KiB) keeps large blocks on mmap: the same run gives the
memory back (+72 MiB). Elsewhere (musl, macOS) this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging

log = logging.getLogger("resplog.memory")

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
THRESHOLD = 128 * 1024
# The cyclic collector's thresholds once started: a young collection once 50,000 more
# containers were allocated than freed, rather than 700. A create allocates many
# short-lived containers, nearly all freed by their reference counts within the request,
# so the count grows only by what is alive at once: over 10,000 for a burst of 64
# streaming creates in flight (what waits longer for a collection is only garbage in
# cycles, which reference counts cannot free). Each young collection walks all that is
# alive: at 700, and still at 10,000 (the setting before), the collector ran within
# every such burst, 34 µs of a create's CPU, 4 % (`bench/burst_bench.py --collector`);
# at 50,000 a burst of 64 meets none. A burst of 256 still does, once: a young collection
# of some 50,000 objects, 12 ms (docs/performance.md, "The collector in a burst"), where
# at 10,000 four times as many ran, the longest 12 ms too. The older generations keep
# their ratios (10, 10).
COLLECT_AFTER = (50_000, 10, 10)


def return_freed_memory() -> bool:
    """Pin glibc's mmap threshold; whether it was set."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD))
    log.debug("mmap threshold pinned at %d bytes: %s", THRESHOLD, ok)
    return ok


def freeze_startup_heap() -> None:
    """Put what the process holds once started (modules, pools, the app: some 90,000
    objects) out of the cyclic collector's sight, and set its thresholds
    (`COLLECT_AFTER`). A full collection otherwise walks all of it, 50-190 ms on the
    2-core box, and meanwhile nothing in the process runs: every live tail waits, which
    made the floor of the remote tail's p99 (docs/performance.md, "The remote tail"), and
    a worker's generations and flushes wait. Frozen objects are still freed by their
    reference counts; only cycles among them would stay, and startup leaves none
    (collected first)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*COLLECT_AFTER)
