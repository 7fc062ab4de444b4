"""The real engine (vLLM on the CPU serving a tiny random-weight Llama), for the suites
marked `realengine`; `bench/realengine/setup.sh` builds it."""

from __future__ import annotations

import functools
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

HOME = Path(
    os.environ.get("REALENGINE_HOME")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "resplog/realengine"
)
MODEL = "tiny-llama"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    python, model = HOME / "venv/bin/python", HOME / "tiny-llama"
    if not python.exists() or not (model / "config.json").exists():
        pytest.fail(f"no real engine in {HOME}: run bench/realengine/setup.sh first")
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }
    cmd = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "4096",
        "--max-num-seqs",
        "64",
    ]
    # While it generates, vLLM's CPU workers keep every core they may use busy. On a box of
    # two cores that starved the server and PostgreSQL for up to 2.5 s at a time, the tests'
    # timing then no longer said anything of resplog's (a cancel that reached the engine
    # only after vLLM had spent the whole budget, now and then). So vLLM gets the last
    # core alone, its threads bound to it, and the server and the database the others.
    cores = sorted(os.sched_getaffinity(0))
    pinned = None
    if len(cores) > 1:
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(cores[-1])
        pinned = functools.partial(os.sched_setaffinity, 0, {cores[-1]})
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=pinned
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vLLM exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"vLLM did not become healthy:\n{log.read_text()[-3000:]}")


def metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    values = [
        float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    ]
    assert values, f"vLLM exports no {name}"
    return sum(values)


def running_after(url: str, within: float) -> float:
    """Requests vLLM still runs, once none do or `within` seconds have passed."""
    deadline = time.monotonic() + within
    while (running := metric(url, "vllm:num_requests_running")) and time.monotonic() < deadline:
        time.sleep(0.2)
    return running
