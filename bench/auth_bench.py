"""What admission costs per request: sequential `GET /v1/models` through a real
`resplog serve` (SQLite, scripted engine) with `--auth none`, `--auth keys` (key lookups
cached, the default 10 s) and `--auth keys --key-cache-s 0` (one indexed lookup per request).
Prints the median requests/s of five rounds; not a test.

    .venv/bin/python bench/auth_bench.py --requests 1000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.conftest import start_server, stop_server
from tests.e2e.security.conftest import make_key

MODES = {
    "none": (),
    "keys (cache 10 s)": ("--auth", "keys"),
    "keys (no cache)": ("--auth", "keys", "--key-cache-s", "0"),
}


def rate(client: httpx.Client, requests: int) -> float:
    start = time.perf_counter()
    for _ in range(requests):
        client.get("/v1/models").raise_for_status()
    return requests / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000, help="per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, flags) in enumerate(MODES.items()):
            where = Path(tmp) / str(i)
            where.mkdir()
            server = start_server(
                f"sqlite+aiosqlite:///{where / 'db'}", "sqlite", where / "log", *flags
            )
            try:
                key = make_key(server, "bench")
                headers = {"Authorization": f"Bearer {key}"}
                with httpx.Client(base_url=server.base_url, headers=headers) as client:
                    rate(client, 200)  # warm up
                    rates = [rate(client, args.requests) for _ in range(args.rounds)]
                print(f"{label:18s} {statistics.median(rates):7.0f} requests/s (median)")
            finally:
                stop_server(server)


if __name__ == "__main__":
    main()
