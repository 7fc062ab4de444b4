"""The chaos soak, kept as a regression test (marker `soak`, not in the default run: about
a minute on two cores): 2 API replicas and 2 workers on PostgreSQL under streaming load
with drops, resumes and cancels, while every 3 s one of them is killed with SIGKILL and
replaced. `bench/soak_bench.py` does the work and the accounting (see its docstring); this
fails unless every promise held:

    .venv/bin/pytest -m soak -s
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "soak_bench.py"


@pytest.mark.soak
def test_kill_9_chaos_loses_doubles_and_strands_nothing() -> None:
    args = ("--clients", "16", "--seconds", "30", "--chaos-every", "3", "--lease-ttl-s", "2")
    done = subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=600
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "lost=0 duplicated=0 stuck=0 client errors=0" in done.stdout
    assert "ids without a row=0" in done.stdout
    assert "verify --all: exit 0" in done.stdout
