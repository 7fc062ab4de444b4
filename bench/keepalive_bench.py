"""Keep-alive at the client's idle limit: does a request ever meet a closing connection?

Connections reused after idling as long as the OpenAI SDKs let them. Starts `resplog serve`
(scripted engine, no delay, PostgreSQL or SQLite) twice, with its default `--keep-alive-s`
and, as the baseline, with `--keep-alive-s 5` (uvicorn's default, equal to the idle time the
OpenAI SDKs' httpx reuses a connection for). Each time `--clients` streaming clients keep
its loop busy (30 at once, as `memory_bench.py` runs them) while `--probes` clients, one
connection each, ask for `/health` every 5 s, give or take a few milliseconds: each reuses
its connection as httpx would (idle up to 5 s) right when a 5 s server closes it. Prints
the probes answered and the connection errors of each
(`httpx.ReadError` is a request reset by the server's close). Not a test.

    .venv/bin/python bench/keepalive_bench.py                  # 45 s a server
    .venv/bin/python bench/keepalive_bench.py --sqlite --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import random
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from bench.harness import Table, database_arguments, parser, serving

# How long a probe's connection idles between its requests: httpx's (and the OpenAI SDKs')
# keep-alive expiry, give or take what the loop's turns add.
IDLE_S = 5.0
JITTER_S = (-0.03, 0.01)


async def load(url: str, args: argparse.Namespace) -> tuple[int, collections.Counter[str]]:
    """The probes answered, and the errors by kind (the streaming load's included)."""
    errors: collections.Counter[str] = collections.Counter()
    answered = 0
    stop = time.monotonic() + args.seconds
    body = {
        "model": "scripted",
        "input": "How does the log keep a response?",
        "stream": True,
        "metadata": {"scripted_tokens": "20", "scripted_delay_ms": "0"},
    }

    async def streaming(http: httpx.AsyncClient) -> None:
        while time.monotonic() < stop:
            try:
                async with http.stream("POST", "/v1/responses", json=body) as answer:
                    async for _ in answer.aiter_raw():
                        pass
            except httpx.HTTPError as exc:
                errors[f"load: {type(exc).__name__}"] += 1

    async def probe() -> None:
        nonlocal answered
        # One connection, reused past the pool's own expiry so that the idle time is ours.
        limits = httpx.Limits(max_connections=1, keepalive_expiry=60)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as http:
            await http.get("/health")
            while time.monotonic() < stop:
                await asyncio.sleep(IDLE_S + random.uniform(*JITTER_S))
                try:
                    (await http.get("/health")).raise_for_status()
                    answered += 1
                except httpx.HTTPError as exc:
                    errors[f"probe: {type(exc).__name__}"] += 1

    limits = httpx.Limits(max_connections=args.clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        await asyncio.gather(
            *(streaming(http) for _ in range(args.clients)),
            *(probe() for _ in range(args.probes)),
        )
    return answered, errors


def main() -> int:
    p = parser(__doc__ or "")
    database_arguments(p)
    p.add_argument("--clients", type=int, default=30, help="streaming clients at once")
    p.add_argument("--probes", type=int, default=40, help="clients reusing idle connections")
    p.add_argument("--seconds", type=float, default=45, help="how long each server is loaded")
    args = p.parse_args()
    table = Table(f"connection errors, {args.probes} probes every ~5 s", "errors")
    runs = {}
    for name, flags in (
        ("default --keep-alive-s", ()),
        ("--keep-alive-s 5", ("--keep-alive-s", "5")),
    ):
        with serving(*flags, sqlite=args.sqlite, admin_url=args.database_url) as server:
            answered, errors = asyncio.run(load(server.base_url, args))
        print(f"{name}: {answered} probes answered; errors {dict(errors) or 'none'}", flush=True)
        runs[name] = sum(errors.values())
    table.add(
        "default --keep-alive-s",
        runs["default --keep-alive-s"],
        "--keep-alive-s 5",
        runs["--keep-alive-s 5"],
    )
    table.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
