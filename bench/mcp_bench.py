"""An MCP step: what resplog adds to a tool step beyond the MCP call, and a killed loop.

What resplog adds to each step of the MCP tool loop beyond the MCP call itself, and how
long a loop whose worker is killed mid-call takes to finish on another.

The tests' MCP server (tests/fakes/mcp_server.py) and a real `resplog serve` (scripted
engine, no pacing) on a fresh PostgreSQL database. Baseline, from the same run: the bare
MCP call through resplog's own client (`adapters/tools/mcp.py`: connect, initialize,
call). A step is timed from the call's `response.mcp_call_arguments.done` to the next
item the model starts after the result, over `--responses` responses of `--steps` calls.
Recovery: an API replica and a worker, the worker `kill -9`ed while a call hangs, a
second worker finishing the response, beside the lease TTL that bounds it. `--builtins N`
adds gpt-oss's built-ins (docs/mcp.md) through the sglang stand-in, each step beside the
bare call of the same tool.

    .venv/bin/python bench/mcp_bench.py --responses 40 --steps 5 --builtins 20
    .venv/bin/python bench/mcp_bench.py --responses 3 --steps 2 --bare 20
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from adapters.tools.mcp import McpToolServers
from bench.harness import Table, database, database_arguments, median, parser, pct, serving, workdir
from tests.e2e.cluster import start_worker, stop
from tests.e2e.conftest import LOOPBACK_MCP, start_server, stop_server
from tests.e2e.test_mcp import _start_tools
from tests.fakes.process import FakeProcess


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


def builtins_figures(tmp: Path, admin_url: str, responses: int, bare_n: int) -> None:
    (tmp / "builtins").mkdir()
    tools = _start_tools(tmp / "builtins")
    fake = FakeProcess("tests.fakes.sglang_server", "--style", "cumulative")
    engine = ("--engine", "sglang", "--engine-url", fake.url)
    try:
        with serving("--tool-server", tools.url, admin_url=admin_url, engine=engine) as server:
            for n, a in BUILTIN_CALLS.items():
                bare_calls(tools.url, 5, n, a)  # warm up
            # Half the bare calls before the loop and half after: the box's load drifts.
            bare = {n: bare_calls(tools.url, bare_n // 2, n, a) for n, a in BUILTIN_CALLS.items()}
            steps = builtin_steps(server.base_url, responses)
            for n, a in BUILTIN_CALLS.items():
                bare[n] += bare_calls(tools.url, bare_n // 2, n, a)
    finally:
        fake.stop()
        tools.process.kill()
    table = Table(f"a built-in step, {responses} responses", "ms")
    for name, values in steps.items():
        table.add(f"{name} step, p50", median(values), "bare call, p50", median(bare[name]))
        table.add(f"{name} step, p99", pct(values, 99), "bare call, p99", pct(bare[name], 99))
    table.print()


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
    p = parser(__doc__)
    database_arguments(p, sqlite=False)
    p.add_argument("--responses", type=int, default=40)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--bare", type=int, default=200, help="bare MCP calls for the baseline")
    p.add_argument("--lease-ttl-s", type=float, default=3.0)
    p.add_argument("--builtins", type=int, default=0, help="responses of the built-ins part")
    args = p.parse_args()
    with workdir() as tmp:
        tools = _start_tools(tmp)
        try:
            with serving(*LOOPBACK_MCP, admin_url=args.database_url) as server:
                bare_calls(tools.url, 10)  # warm up
                bare = bare_calls(tools.url, args.bare)
                steps = loop_steps(server.base_url, tools.url, args.responses, args.steps)
        finally:
            tools.process.kill()
        base = median(bare)
        table = Table(f"an MCP step, {len(steps)} steps, {len(bare)} bare calls", "ms")
        table.add("step (arguments done -> next item), p50", median(steps), "bare call, p50", base)
        table.add("step, p99", pct(steps, 99), "bare call, p99", pct(bare, 99))
        table.add("added by resplog (step - bare median), p50", median([s - base for s in steps]))
        with database(False, tmp, args.database_url) as url:
            took = recovery(url, tmp, args.lease_ttl_s)
        table.add(
            "kill -9 mid-call -> completed on another worker, s",
            took,
            "lease TTL",
            args.lease_ttl_s,
        )
        table.print()
        if args.builtins:
            builtins_figures(tmp, args.database_url, args.builtins, max(10, args.bare // 4))


if __name__ == "__main__":
    main()
