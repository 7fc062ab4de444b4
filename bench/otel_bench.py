"""What OpenTelemetry tracing costs a create: two `resplog serve` processes on SQLite side by
side, one untraced (the baseline) and one with `--otel-endpoint` exporting to an OTLP/HTTP
receiver here (it decodes each export, as tests/e2e/test_tracing.py does). Sequential
plain creates, alternating between the two one create at a time (the box's load drifts);
prints the median latency of each and
their ratio, and how many spans arrived. Not a test.

    .venv/bin/python bench/otel_bench.py --rounds 5 --creates 40
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.conftest import start_server, stop_server
from tests.e2e.test_tracing import Receiver, _handler


def creates(base: str, count: int, tokens: int) -> list[float]:
    body = {"model": "scripted", "input": "bench", "metadata": {"scripted_tokens": str(tokens)}}
    out = []
    with httpx.Client(base_url=base, timeout=60) as http:
        for _ in range(count):
            t0 = time.perf_counter()
            r = http.post("/v1/responses", json=body)
            out.append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--creates", type=int, default=40, help="plain creates per round")
    parser.add_argument("--tokens", type=int, default=50, help="answer tokens per response")
    args = parser.parse_args()
    receiver = Receiver()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    receiver.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    tmp = Path(tempfile.mkdtemp(prefix="resplog-otel-bench-"))
    plain = start_server(f"sqlite+aiosqlite:///{tmp / 'a.db'}", "sqlite", tmp / "a.log")
    traced = start_server(
        f"sqlite+aiosqlite:///{tmp / 'b.db'}",
        "sqlite",
        tmp / "b.log",
        "--otel-endpoint",
        receiver.url,
    )
    try:
        creates(plain.base_url, 5, args.tokens)  # warm both up
        creates(traced.base_url, 5, args.tokens)
        base: list[float] = []
        with_otel: list[float] = []
        for _ in range(args.rounds * args.creates):
            base += creates(plain.base_url, 1, args.tokens)
            with_otel += creates(traced.base_url, 1, args.tokens)
    finally:
        stop_server(traced)  # exports what it still holds
        stop_server(plain)
        httpd.shutdown()
    b, t = statistics.median(base) * 1e3, statistics.median(with_otel) * 1e3
    print(f"creates per server={len(base)} tokens/response={args.tokens} (SQLite, sequential)")
    print(f"untraced (baseline): median {b:.2f} ms")
    print(f"traced (OTLP/HTTP):  median {t:.2f} ms  ratio {t / b:.3f}")
    print(f"spans received: {len(receiver.spans)} (4 per create expected)")


if __name__ == "__main__":
    main()
