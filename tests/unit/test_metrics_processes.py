"""The metrics of several processes (adapters/metrics/prom.py, multiprocess mode), with
real processes: each writes its values in the shared directory, a page (whichever process
renders it) sums them, and a process marked gone leaves the gauges' sums, not the totals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapters.metrics import Metrics, process_gone

# One process's life: it holds `held` leases, claimed `claimed`, has a request in flight.
CHILD = """
import asyncio
from adapters.metrics import Metrics

async def main() -> None:
    metrics = Metrics()
    metrics.watch(lambda: {held}, lambda: 0)
    metrics.claimed({claimed})
    metrics.in_flight.inc()

asyncio.run(main())
"""


def _process(shared: Path, held: int, claimed: int) -> int:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(held=held, claimed=claimed)],
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(shared)},
    )
    assert child.wait(timeout=30) == 0
    return child.pid


def _page(metrics: Metrics) -> dict[str, float]:
    return {
        s.name: s.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for s in family.samples
        if not s.labels
    }


def test_a_page_sums_every_process_and_forgets_the_gauges_of_one_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _process(tmp_path, held=2, claimed=3)
    _process(tmp_path, held=1, claimed=4)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    page = _page(Metrics())  # this process's own values are in its memory: not on the page
    assert page["resplog_leases_held"] == 3
    assert page["resplog_http_requests_in_flight"] == 2
    assert page["resplog_leases_claimed_total"] == 7
    process_gone(str(tmp_path), first)
    page = _page(Metrics())
    assert page["resplog_leases_held"] == 1
    assert page["resplog_http_requests_in_flight"] == 1
    assert page["resplog_leases_claimed_total"] == 7  # a total never goes down
