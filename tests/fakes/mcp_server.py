"""A small real MCP server for the tool-loop tests, run as its own process:
`python -m tests.fakes.mcp_server --port P --calls FILE [--gate FILE] [--auth VALUE]`.

Built with the official `mcp` package (`MCPServer`, streamable HTTP). Every call appends
the tool's name to `--calls`, so a test counts executions across processes. Tools:
`echo` and `shout` (text), `secret_tool` (for `allowed_tools`), `boom` (raises), `hang`
(never returns), `garbage` (a huge output), and `slow` (returns once `--gate` exists, so
a test can kill the caller while the call is in flight). With `--auth`, a request without
that exact `Authorization` header is refused with 401.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send


def build(calls: Path, gate: Path | None) -> MCPServer:
    server = MCPServer("resplog-test-tools")

    def count(name: str) -> None:
        with calls.open("a") as f:
            f.write(name + "\n")

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        count("echo")
        return f"echo: {text}"

    @server.tool(description="Say the text loudly.")
    def shout(text: str) -> str:
        count("shout")
        return text.upper()

    @server.tool(description="A tool no allowed_tools list in the tests names.")
    def secret_tool(text: str) -> str:
        count("secret_tool")
        return "should not be called"

    @server.tool(description="Always fails.")
    def boom(text: str) -> str:
        count("boom")
        raise RuntimeError("boom went the tool")

    @server.tool(description="Never returns.")
    async def hang(text: str) -> str:
        count("hang")
        await asyncio.Event().wait()
        return "unreachable"

    @server.tool(description="Returns far too much.")
    def garbage(text: str) -> str:
        count("garbage")
        return "x" * 50_000

    @server.tool(description="Returns once the gate file exists.")
    async def slow(text: str) -> str:
        count("slow")
        # Polled: the gate is a file another process (the test) creates.
        while gate is not None and not await asyncio.to_thread(gate.exists):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        return f"slow: {text}"

    return server


class RequireAuth:
    def __init__(self, app: ASGIApp, value: str) -> None:
        self.app, self.value = app, value.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.value:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await self.app(scope, receive, send)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--calls", type=Path, required=True)
    parser.add_argument("--gate", type=Path)
    parser.add_argument("--auth")
    args = parser.parse_args()
    app: ASGIApp = build(args.calls, args.gate).streamable_http_app(stateless_http=True)
    if args.auth:
        app = RequireAuth(app, args.auth)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
