"""The MCP tool loop: what resplog adds to each tool step beyond the MCP call itself, and
how long a loop whose worker is killed takes to finish on another.

Starts the tests' MCP server (tests/fakes/mcp_server.py, its own process) and `resplog
serve` (scripted engine, no pacing) on a fresh PostgreSQL database. Baseline: the bare
MCP call through the same client resplog uses (`adapters/tools/mcp.py`: connect,
initialize, call), one after another. Then streamed responses whose scripted model calls
`echo` `--steps` times; a step is timed, client-side, from the call's
`response.mcp_call_arguments.done` to the next item the model starts after the result
(the call, its two durable appends, and the next generation's start). Prints p50/p99 of
the step and of the step minus the bare call's median. Recovery: an API replica
(`--workers 0`) and a worker, a background loop whose second call never returns, a second
worker started, the first one `kill -9`ed; the time from the kill to the response
completing, beside the lease TTL that bounds it. With `--builtins N`, also gpt-oss's
built-ins (docs/mcp.md): `resplog serve --engine sglang --tool-server` on the sglang
stand-in, N responses of three built-in steps (`browser.search`, `python`, `browser.open`),
each timed from the call's arguments being complete (`web_search_call.in_progress`,
`code_interpreter_call_code.done`) to the next item, beside the bare call of the same tool.
Not a test.

    .venv/bin/python bench/mcp_bench.py --responses 40 --steps 5 [--builtins 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.tools.mcp import McpToolServers
from bench.databases import PG, drop_postgres, fresh_postgres
from tests.e2e.cluster import start_worker, stop
from tests.e2e.conftest import LOOPBACK_MCP, start_server, stop_server
from tests.e2e.test_mcp import _start_tools


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bare_calls(
    url: str, n: int, name: str = "echo", args: dict[str, object] | None = None
) -> list[float]:
    async def run() -> list[float]:
        servers, out = McpToolServers(), []
        for _ in range(n):
            t0 = time.perf_counter()
            await servers.call_tool(url, {}, name, args or {"text": "x"})
            out.append((time.perf_counter() - t0) * 1000)
        return out

    return asyncio.run(run())


# The calls of `tests/fakes/transcripts.py` BUILTIN_LOOP, for the bare baseline.
BUILTIN_CALLS = {
    "browser.search": {"query": "resplog durable", "topn": 3},
    "python": {"code": "print(6 * 7)"},
    "browser.open": {"id": "https://example.test/resplog"},
}
# When a built-in call's arguments are complete, and which tool it is.
_READY = {
    "response.web_search_call.in_progress": "browser",
    "response.code_interpreter_call_code.done": "python",
}


def builtin_steps(base: str, responses: int) -> dict[str, list[float]]:
    """Per tool, the loop's steps (arguments complete -> the model's next item), ms."""
    out: dict[str, list[float]] = {name: [] for name in BUILTIN_CALLS}
    tools = [{"type": "web_search"}, {"type": "code_interpreter", "container": {"type": "auto"}}]
    with openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0) as client:
        model = client.models.list().data[0].id
        for _ in range(responses):
            order = iter(BUILTIN_CALLS)
            ready: float | None = None
            waiting = False
            for event in client.responses.create(
                model=model,
                input="bench [fake:builtin_loop]",
                tools=tools,
                stream=True,  # type: ignore[arg-type]
            ):
                now = time.perf_counter()
                if event.type in _READY:
                    ready = now
                elif event.type == "response.output_item.done" and ready is not None:
                    waiting = True
                elif event.type == "response.output_item.added" and waiting:
                    assert ready is not None
                    out[next(order)].append((now - ready) * 1000)
                    ready, waiting = None, False
    return out


def builtins_figures(tmp: Path, url: str, responses: int, bare_n: int) -> None:
    from tests.fakes.process import FakeProcess

    (tmp / "builtins").mkdir()
    tools = _start_tools(tmp / "builtins")
    fake = FakeProcess("tests.fakes.sglang_server", "--style", "cumulative")
    engine = ("--engine", "sglang", "--engine-url", fake.url)
    server = start_server(
        url, "postgres", tmp / "builtins.log", "--tool-server", tools.url, engine=engine
    )
    try:
        for n, a in BUILTIN_CALLS.items():
            bare_calls(tools.url, 5, n, a)  # warm up
        # Half the bare calls before the loop and half after: the box's load drifts.
        bare = {n: bare_calls(tools.url, bare_n // 2, n, a) for n, a in BUILTIN_CALLS.items()}
        steps = builtin_steps(server.base_url, responses)
        for n, a in BUILTIN_CALLS.items():
            bare[n] += bare_calls(tools.url, bare_n // 2, n, a)
    finally:
        stop_server(server)
        fake.stop()
        tools.process.kill()
    for name, values in steps.items():
        b = statistics.median(bare[name])
        added = [v - b for v in values]
        print(
            f"built-in {name}, n={len(values)}: bare p50 {pct(bare[name], 0.5):.1f} ms; "
            f"step p50 {pct(values, 0.5):.1f} / p99 {pct(values, 0.99):.1f} ms; "
            f"added p50 {pct(added, 0.5):.1f} / p99 {pct(added, 0.99):.1f} ms"
        )


def loop_steps(base: str, tool_url: str, responses: int, steps: int) -> list[float]:
    tool = {"type": "mcp", "server_label": "t", "server_url": tool_url, "require_approval": "never"}
    out: list[float] = []
    with openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0) as client:
        for _ in range(responses):
            called_at: float | None = None
            waiting = False
            stream = client.responses.create(
                model="scripted",
                input="bench",
                tools=[tool],  # type: ignore[list-item]
                metadata={"scripted_calls": ",".join(["echo"] * steps)},
                stream=True,
            )
            for event in stream:
                now = time.perf_counter()
                if event.type == "response.mcp_call_arguments.done":
                    called_at = now
                elif event.type == "response.output_item.done" and called_at is not None:
                    waiting = True
                elif event.type == "response.output_item.added" and waiting:
                    assert called_at is not None
                    out.append((now - called_at) * 1000)
                    called_at, waiting = None, False
    return out


def recovery(url: str, tmp: Path, ttl: float) -> float:
    (tmp / "rec").mkdir()
    tools = _start_tools(tmp / "rec")
    flags = ("--lease-ttl-s", str(ttl), *LOOPBACK_MCP)
    api = start_server(url, "postgres", tmp / "api.log", "--workers", "0", *flags)
    victim = start_worker(url, tmp / "victim.log", *flags)
    survivor = None
    try:
        tool = {"type": "mcp", "server_label": "t", "server_url": tools.url}
        tool["require_approval"] = "never"
        client = openai.OpenAI(base_url=f"{api.base_url}/v1", api_key="unused", max_retries=0)
        r = client.responses.create(
            model="scripted",
            input="recover",
            background=True,
            tools=[tool],  # type: ignore[list-item]
            metadata={"scripted_calls": "echo,slow,echo"},
        )
        deadline = time.monotonic() + 60
        while tools.calls() != ["echo", "slow"]:
            assert time.monotonic() < deadline, tools.calls()
            time.sleep(0.01)
        survivor = start_worker(url, tmp / "survivor.log", *flags)
        killed = time.perf_counter()
        stop(victim.process, victim.log_file, kill=True)
        while (status := client.responses.retrieve(r.id).status) != "completed":
            assert status in ("queued", "in_progress"), status
            assert time.monotonic() < deadline + 120
            time.sleep(0.02)
        return time.perf_counter() - killed
    finally:
        tools.gate.touch()
        if survivor is not None:
            stop(survivor.process, survivor.log_file)
        stop_server(api)
        tools.process.kill()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--responses", type=int, default=40)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--bare", type=int, default=200, help="bare MCP calls for the baseline")
    p.add_argument("--lease-ttl-s", type=float, default=3.0)
    p.add_argument("--database-url", default=PG)
    p.add_argument("--builtins", type=int, default=0, help="responses of the built-ins part")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        tools = _start_tools(tmp)
        url, name = asyncio.run(fresh_postgres(args.database_url))
        server = start_server(url, "postgres", tmp / "server.log", *LOOPBACK_MCP)
        try:
            bare_calls(tools.url, 10)  # warm up
            bare = bare_calls(tools.url, args.bare)
            steps = loop_steps(server.base_url, tools.url, args.responses, args.steps)
        finally:
            stop_server(server)
            tools.process.kill()
            asyncio.run(drop_postgres(args.database_url, name))
        base = statistics.median(bare)
        added = [s - base for s in steps]
        print(f"bare MCP call (connect+initialize+call), n={len(bare)}:")
        print(f"  p50 {pct(bare, 0.5):.1f} ms   p99 {pct(bare, 0.99):.1f} ms")
        print(f"tool step in the loop (args.done -> next item), n={len(steps)}:")
        print(f"  p50 {pct(steps, 0.5):.1f} ms   p99 {pct(steps, 0.99):.1f} ms")
        print("added by resplog per step (step - bare median):")
        print(f"  p50 {pct(added, 0.5):.1f} ms   p99 {pct(added, 0.99):.1f} ms")
        url, name = asyncio.run(fresh_postgres(args.database_url))
        try:
            took = recovery(url, tmp, args.lease_ttl_s)
        finally:
            asyncio.run(drop_postgres(args.database_url, name))
        print(
            f"recovery after kill -9 mid-call: {took:.2f} s to completed "
            f"(--lease-ttl-s {args.lease_ttl_s:g}: the lease lapses after at most that, "
            f"a sweep runs every ~{args.lease_ttl_s / 2:g} s)"
        )
        if args.builtins:
            url, name = asyncio.run(fresh_postgres(args.database_url))
            try:
                builtins_figures(tmp, url, args.builtins, max(10, args.bare // 4))
            finally:
                asyncio.run(drop_postgres(args.database_url, name))


if __name__ == "__main__":
    main()
