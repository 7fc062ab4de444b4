"""WebSocket against SSE: a create's first delta and a tool loop's turns over each.

Over one WebSocket (docs/websocket.md), beside the same over one kept-alive HTTP
connection with SSE.

A real `resplog serve` (scripted engine, zero delay) on a fresh PostgreSQL database (or
SQLite). Measured over both, interleaved round by round: the time from sending a create
to its first delta (`response.create` against the POST), and a `--turns`-turn tool loop (a
user message that gets a function call, the call's output that gets an answer, each turn
continuing the last by `previous_response_id`): each turn, and the whole loop. Medians
over the rounds, the socket's beside HTTP + SSE's.

    .venv/bin/python bench/ws_bench.py --rounds 30
    .venv/bin/python bench/ws_bench.py --rounds 3 --turns 4 --sqlite
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from bench.harness import Table, database_arguments, median, parser, pct, serving

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
    table = Table(f"medians of {rounds} rounds", "ms")
    for name, figures in (
        ("first delta", first),
        ("tool-loop turn", per_turn),
        (f"{turns}-turn loop", loops),
    ):
        ws, http = figures["websocket"], figures["http+sse"]
        table.add(f"{name}, p50", median(ws) * 1e3, "HTTP + SSE", median(http) * 1e3)
        table.add(f"{name}, p90", pct(ws, 90) * 1e3, "HTTP + SSE", pct(http, 90) * 1e3)
    table.print()


def main() -> None:
    p = parser(__doc__)
    database_arguments(p)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--tokens", type=int, default=20, help="answer tokens per response")
    p.add_argument(
        "--sdk", action="store_true", help="both sides through the official SDK (events parsed)"
    )
    args = p.parse_args()
    with serving(sqlite=args.sqlite, admin_url=args.database_url) as server:
        print(
            f"database={'sqlite' if args.sqlite else 'postgres'} rounds={args.rounds} "
            f"turns={args.turns} tokens/response={args.tokens} "
            f"client={'sdk' if args.sdk else 'raw'} (scripted engine, no delay)"
        )
        run(server.base_url, args.rounds, args.turns, args.tokens, args.sdk)


if __name__ == "__main__":
    main()
