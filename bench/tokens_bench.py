"""What counting and compacting cost beside a create: `POST /v1/responses/input_tokens`
latency against a streamed create's time to first delta, for a conversation of N turns,
and `POST /v1/responses/compact` on that conversation (a real `resplog serve`, scripted
engine at zero delay, PostgreSQL or SQLite). Prints medians; the create's figures are the
baseline of the same run.

    .venv/bin/python bench/tokens_bench.py --turns 50
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.databases import PG, drop_postgres, fresh_postgres
from tests.e2e.conftest import start_server, stop_server


def ms(samples: list[float]) -> str:
    p90 = statistics.quantiles(samples, n=10)[-1]
    return f"{statistics.median(samples):7.1f} ms (p90 {p90:.1f})"


def first_delta(http: httpx.Client, body: dict[str, object]) -> float:
    t0 = time.perf_counter()
    took = None
    with http.stream("POST", "/v1/responses", json={**body, "stream": True}) as r:
        for line in r.iter_lines():  # read to the end: the next round starts clean
            if took is None and line == "event: response.output_text.delta":
                took = (time.perf_counter() - t0) * 1000
    if took is None:
        raise RuntimeError("no delta")
    return took


def run(base: str, turns: int, rounds: int) -> None:
    with httpx.Client(base_url=base, timeout=300) as http:
        last = None
        for i in range(turns):
            body = {"model": "scripted", "input": f"turn {i}: tell me about item {i}"}
            if last:
                body["previous_response_id"] = last
            r = http.post("/v1/responses", json=body)
            r.raise_for_status()
            last = r.json()["id"]
        body = {"model": "scripted", "input": "and now?", "previous_response_id": last}
        count: list[float] = []
        create: list[float] = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            http.post("/v1/responses/input_tokens", json=body).raise_for_status()
            count.append((time.perf_counter() - t0) * 1000)
            create.append(first_delta(http, body))
        compact: list[float] = []
        for _ in range(max(3, rounds // 4)):
            t0 = time.perf_counter()
            http.post("/v1/responses/compact", json=body).raise_for_status()
            compact.append((time.perf_counter() - t0) * 1000)
        print(f"turns={turns} rounds={rounds}")
        print(f"  baseline: streamed create, time to first delta  {ms(create)}")
        print(f"  input_tokens                                    {ms(count)}")
        print(f"  compact ({turns} turns, summary written and stored) {ms(compact)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=50)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--sqlite", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        name = None
        if args.sqlite:
            url = f"sqlite+aiosqlite:///{tmp}/t.db"
        else:
            url, name = asyncio.run(fresh_postgres(PG))
        server = start_server(url, "sqlite" if args.sqlite else "postgres", Path(tmp) / "s.log")
        try:
            print(f"database={'sqlite' if args.sqlite else 'postgres'}")
            run(server.base_url, args.turns, args.rounds)
        finally:
            stop_server(server)
            if name:
                asyncio.run(drop_postgres(PG, name))


if __name__ == "__main__":
    main()
