"""WebSocket mode against HTTP + SSE through a real `resplog serve` (docs/websocket.md).

Starts a server (scripted engine, zero delay) on PostgreSQL or SQLite, then measures, over
one WebSocket and over one keep-alive HTTP connection (POST `stream: true`):

- the time from sending a create to its first delta (`response.create` vs the POST);
- a 10-turn tool loop: a user message that gets a function call, the call's output that
  gets an answer, five times, each turn continuing the last by `previous_response_id`;
  the per-turn latency (send to terminal event) and the whole loop.

Prints medians (and p90) over the rounds; not a test.

    .venv/bin/python bench/ws_bench.py --database postgres --rounds 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.databases import PG, drop_postgres, fresh_postgres
from tests.e2e.conftest import start_server, stop_server

TERMINAL = (b'"type":"response.completed"', b'"type":"response.failed"', b'"type":"error"')
TOOLS = [
    {
        "type": "function",
        "name": "lookup",
        "description": "Look a word up",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
]
# Each create is one of these: (time to first delta, time to the end, final event).
Turn = tuple[float, float, dict[str, Any]]
Send = Callable[[dict[str, Any]], Turn]


def over_socket(ws: ClientConnection) -> Send:
    def send(body: dict[str, Any]) -> Turn:
        t0 = time.perf_counter()
        ws.send(json.dumps({"type": "response.create", **body}))
        first = 0.0
        while True:
            data = ws.recv(decode=False)
            if not first and b'.delta"' in data[:80]:
                first = time.perf_counter() - t0
            if any(t in data[:80] for t in TERMINAL):
                return first, time.perf_counter() - t0, json.loads(data)

    return send


def over_http(http: httpx.Client) -> Send:
    def send(body: dict[str, Any]) -> Turn:
        t0 = time.perf_counter()
        first = 0.0
        last = b""
        with http.stream("POST", "/v1/responses", json={**body, "stream": True}) as r:
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                data = line[6:].encode()
                if not first and b'.delta"' in data[:80]:
                    first = time.perf_counter() - t0
                last = data
        assert any(t in last[:80] for t in TERMINAL[:1]), last[:200]
        return first, time.perf_counter() - t0, json.loads(last)

    return send


def sdk_socket(conn: Any) -> Send:
    """The official SDK's `responses.connect()`, every event parsed into its type."""

    def send(body: dict[str, Any]) -> Turn:
        t0 = time.perf_counter()
        conn.response.create(**body)
        first = 0.0
        while True:
            event = conn.recv()
            if not first and event.type.endswith(".delta"):
                first = time.perf_counter() - t0
            if event.type in ("response.completed", "response.failed", "error"):
                return first, time.perf_counter() - t0, event.model_dump(mode="json")

    return send


def sdk_http(client: openai.OpenAI) -> Send:
    """The official SDK's `responses.create(stream=True)`, every event parsed."""

    def send(body: dict[str, Any]) -> Turn:
        t0 = time.perf_counter()
        first = 0.0
        last: Any = None
        for event in client.responses.create(**body, stream=True):
            if not first and event.type.endswith(".delta"):
                first = time.perf_counter() - t0
            last = event
        return first, time.perf_counter() - t0, last.model_dump(mode="json")

    return send


def tool_loop(send: Send, turns: int, meta: dict[str, str]) -> list[float]:
    """Per-turn latencies of one loop: odd turns ask (and get a call), even turns answer
    the call (and get text)."""
    latencies: list[float] = []
    previous: str | None = None
    call_id = ""
    for i in range(turns):
        body: dict[str, Any] = {"model": "scripted", "tools": TOOLS, "metadata": meta}
        if previous is not None:
            body["previous_response_id"] = previous
        if i % 2 == 0:
            body["input"] = f"look up word {i}"
        else:
            body["input"] = [{"type": "function_call_output", "call_id": call_id, "output": "ok"}]
        _, total, end = send(body)
        response = end["response"]
        assert response["status"] == "completed", end
        previous = response["id"]
        calls = [o for o in response["output"] if o["type"] == "function_call"]
        if i % 2 == 0:
            call_id = calls[0]["call_id"]
        latencies.append(total)
    return latencies


def ms(values: list[float]) -> str:
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
    return f"p50 {statistics.median(values) * 1e3:7.2f} ms  p90 {p90 * 1e3:7.2f} ms"


def run(base: str, rounds: int, turns: int, tokens: int, sdk: bool) -> None:
    url = base.replace("http://", "ws://") + "/v1/responses"
    if not sdk:
        with ws_connect(url, max_size=None) as ws, httpx.Client(base_url=base, timeout=60) as h:
            measure({"websocket": over_socket(ws), "http+sse": over_http(h)}, rounds, turns, tokens)
        return
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="bench", max_retries=0)
    with client, client.responses.connect() as conn:
        modes = {"websocket": sdk_socket(conn), "http+sse": sdk_http(client)}
        measure(modes, rounds, turns, tokens)


def measure(modes: dict[str, Send], rounds: int, turns: int, tokens: int) -> None:
    meta = {"scripted_tokens": str(tokens), "scripted_delay_ms": "0"}
    for send in modes.values():  # warm both paths up
        send({"model": "scripted", "input": "warm", "metadata": meta})
        tool_loop(send, 2, meta)
    first: dict[str, list[float]] = {m: [] for m in modes}
    per_turn: dict[str, list[float]] = {m: [] for m in modes}
    loops: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(rounds):  # interleaved, so both see the same machine
        for mode, send in modes.items():
            first[mode].append(send({"model": "scripted", "input": "hi", "metadata": meta})[0])
            t0 = time.perf_counter()
            per_turn[mode] += tool_loop(send, turns, meta)
            loops[mode].append(time.perf_counter() - t0)
    for mode in modes:
        print(f"{mode:9s} first delta        {ms(first[mode])}")
        print(f"{mode:9s} tool-loop turn     {ms(per_turn[mode])}")
        print(f"{mode:9s} {turns}-turn loop       {ms(loops[mode])}")
    gain = statistics.median(loops["http+sse"]) / statistics.median(loops["websocket"])
    print(f"the {turns}-turn loop over one socket takes 1/{gain:.2f} of HTTP + SSE's time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=20, help="answer tokens per response")
    parser.add_argument(
        "--sdk", action="store_true", help="both sides through the official SDK (events parsed)"
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="resplog-bench-"))
    name = ""
    if args.database == "postgres":
        url, name = asyncio.run(fresh_postgres())
    else:
        url = f"sqlite+aiosqlite:///{tmp / 'bench.db'}"
    server = start_server(url, args.database, tmp / "server.log")
    try:
        print(
            f"database={args.database} rounds={args.rounds} turns={args.turns} "
            f"tokens/response={args.tokens} client={'sdk' if args.sdk else 'raw'} "
            "(scripted engine, no delay)"
        )
        run(server.base_url, args.rounds, args.turns, args.tokens, args.sdk)
    finally:
        stop_server(server)
        if name:
            asyncio.run(drop_postgres(PG, name))
        subprocess.run(["rm", "-rf", str(tmp)], check=False)


if __name__ == "__main__":
    main()
