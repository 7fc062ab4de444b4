"""A small real MCP server for the tool-loop tests, run as its own process:
`python -m tests.fakes.mcp_server --port P --calls FILE [--gate FILE] [--auth VALUE]`.

Built with the official `mcp` package (`MCPServer`, streamable HTTP). Every call appends
the tool's name to `--calls`, so a test counts executions across processes. Tools:
`echo` and `shout` (text), `secret_tool` (for `allowed_tools`), `boom` (raises), `hang`
(never returns), `garbage` (a huge output), `slow` (returns once `--gate` exists, so
a test can kill the caller while the call is in flight), `blocks` (an embedded text
resource, a resource link and an image) and `structured` (structured content alone).
With `--auth`, a request without that exact `Authorization` header is refused with 401.
`--list-mark FILE` creates FILE when the server is asked for its tools, and `--list-gate
FILE` answers that question only once FILE exists: two servers so joined show whether a
client asks them at the same time.
`--lists FILE` appends a line to FILE at each such question, so a test counts them.
`--page-size N` lists the tools N at a time, each page's `nextCursor` naming the next, as
the protocol lets a server with many tools do; with `--endless` the last page names the
first again, as a broken server might. `--bulky` adds a tool whose description alone is
100,000 characters, for the limit on a tool list's size.

It is also a tool server for gpt-oss's built-ins (`resplog serve --tool-server`, docs/mcp.md):
`browser.search`, `browser.open` and `browser.find` over a small corpus of local pages
(`PAGES`; nothing reaches the internet), and `python`, which runs the code in a
subprocess with a timeout and an output cap. A `browser.*` query or code that holds
"[gate]" waits for `--gate` first, like `slow`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.types import (
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ListToolsResult,
    PaginatedRequestParams,
    ResourceLink,
    TextResourceContents,
    ToolAnnotations,
)
from starlette.types import ASGIApp, Receive, Scope, Send


class PagedServer(MCPServer):
    """`MCPServer` answering `tools/list` a page at a time: the package's server has no
    option for it, so its handler of that request (the one it registers with its
    low-level server) is replaced. The cursor is the index of the page's first tool."""

    def __init__(self, name: str, page_size: int, endless: bool = False) -> None:
        super().__init__(name)
        self.page_size, self.endless = page_size, endless

    async def _handle_list_tools(self, ctx: Any, params: PaginatedRequestParams | None) -> Any:
        tools = await self.list_tools()
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + self.page_size
        more = str(end) if end < len(tools) else ("0" if self.endless else None)
        return ListToolsResult(tools=tools[start:end], next_cursor=more)


def build(
    calls: Path,
    gate: Path | None,
    page_size: int | None = None,
    endless: bool = False,
    bulky: bool = False,
) -> MCPServer:
    name = "resplog-test-tools"
    server = MCPServer(name) if page_size is None else PagedServer(name, page_size, endless)

    def count(name: str) -> None:
        with calls.open("a") as f:
            f.write(name + "\n")

    # Changes nothing, and says so (MCP's `readOnlyHint`), for the `read_only` filters of
    # `allowed_tools` and `require_approval`; the other tools give no hint.
    @server.tool(description="Echo the text back.", annotations=ToolAnnotations(readOnlyHint=True))
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

    @server.tool(description="Answers in blocks that are not text.")
    def blocks(text: str) -> list[ContentBlock]:
        count("blocks")
        doc = TextResourceContents(uri="file:///notes.txt", mime_type="text/plain", text=text)
        png = base64.b64encode(b"\x89PNG\r\n").decode()
        return [
            EmbeddedResource(type="resource", resource=doc),
            ResourceLink(type="resource_link", name="report", uri="https://example.com/r.pdf"),
            ImageContent(type="image", data=png, mime_type="image/png"),
        ]

    @server.tool(description="Answers in structured content alone.")
    def structured(text: str) -> CallToolResult:
        count("structured")
        return CallToolResult(content=[], structured_content={"echo": text, "n": 1})

    if bulky:

        @server.tool(description="A tool described at length. " + "x" * 100_000)
        def bulky(text: str) -> str:
            count("bulky")
            return text

    builtins(server, count, gate)
    return server


# The browser's pages: URL -> (title, text). Small and local: the tests' whole "web".
PAGES = {
    "https://example.test/resplog": (
        "resplog",
        "resplog is a durable Responses API server.\nEvery response is an event log.\n"
        "A tool loop survives a kill -9 of its worker.",
    ),
    "https://example.test/harmony": (
        "harmony",
        "gpt-oss writes harmony.\nIts built-in tools are browser and python.",
    ),
}
PYTHON_TIMEOUT_S = 5.0
PYTHON_MAX_OUTPUT = 4000


def _search(query: str, topn: int) -> str:
    words = query.lower().split()
    hits = [
        (url, title)
        for url, (title, text) in PAGES.items()
        if any(w in (title + " " + text).lower() for w in words)
    ][:topn]
    if not hits:
        return f"No results for {query!r}."
    return "\n".join(f"【{i}†{title}†{url}】" for i, (url, title) in enumerate(hits))


def _open(target: str) -> str:
    page = PAGES.get(target)
    if page is None:
        return f"Cannot open {target!r}: no such page."
    title, text = page
    lines = "\n".join(f"L{i}: {line}" for i, line in enumerate(text.splitlines()))
    return f"[{title}] {target}\n{lines}"


def _find(pattern: str, target: str) -> str:
    for url, (_, text) in PAGES.items():
        if target in ("", url):
            found = [line for line in text.splitlines() if pattern.lower() in line.lower()]
            if found:
                return f"{url}: " + " | ".join(found)
    return f"No match for {pattern!r}."


def _run_python(code: str) -> str:
    """The code in a fresh interpreter (isolated mode), bounded in time and output."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", code],
            capture_output=True,
            text=True,
            timeout=PYTHON_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"Timed out after {PYTHON_TIMEOUT_S:g} s."
    out = done.stdout + done.stderr
    if len(out) > PYTHON_MAX_OUTPUT:
        out = out[:PYTHON_MAX_OUTPUT] + f"\n[output cut at {PYTHON_MAX_OUTPUT} characters]"
    return out


def builtins(server: MCPServer, count: Callable[[str], None], gate: Path | None) -> None:
    async def gated(text: str) -> None:
        while "[gate]" in text and gate is not None and not await asyncio.to_thread(gate.exists):  # noqa: ASYNC110
            await asyncio.sleep(0.05)

    @server.tool(name="browser.search", description="Search the local corpus.")
    async def search(query: str, topn: int = 10, source: str | None = None) -> str:
        count("browser.search")
        await gated(query)
        return _search(query, topn)

    @server.tool(name="browser.open", description="Open a page of the corpus by its URL.")
    def open_(id: str | int = -1, cursor: int = -1, loc: int = -1, num_lines: int = -1) -> str:
        count("browser.open")
        return _open(str(id))

    @server.tool(name="browser.find", description="Find a pattern in a page (or all pages).")
    def find(pattern: str, cursor: int = -1, url: str = "") -> str:
        count("browser.find")
        return _find(pattern, url)

    @server.tool(name="python", description="Run Python code; returns its output.")
    async def python(code: str) -> str:
        count("python")
        await gated(code)
        return await asyncio.to_thread(_run_python, code)


class RequireAuth:
    def __init__(self, app: ASGIApp, value: str) -> None:
        self.app, self.value = app, value.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.value:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await self.app(scope, receive, send)


class OnList:
    """Acts on a `tools/list` request before the server answers it (`--list-mark`,
    `--list-gate`, `--lists`): reads the JSON-RPC body, then hands it on unchanged."""

    def __init__(
        self, app: ASGIApp, mark: Path | None, gate: Path | None, lists: Path | None
    ) -> None:
        self.app, self.mark, self.gate, self.lists = app, mark, gate, lists

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if b'"tools/list"' in body:
            if self.lists is not None:
                with self.lists.open("a") as f:
                    f.write("tools/list\n")
            if self.mark is not None:
                self.mark.touch()
            while self.gate is not None and not await asyncio.to_thread(self.gate.exists):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        sent = False

        async def replay() -> dict[str, object]:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--calls", type=Path, required=True)
    parser.add_argument("--gate", type=Path)
    parser.add_argument("--auth")
    parser.add_argument("--list-mark", type=Path)
    parser.add_argument("--list-gate", type=Path)
    parser.add_argument("--lists", type=Path)
    parser.add_argument("--page-size", type=int)
    parser.add_argument("--endless", action="store_true")
    parser.add_argument("--bulky", action="store_true")
    args = parser.parse_args()
    server = build(args.calls, args.gate, args.page_size, args.endless, args.bulky)
    app: ASGIApp = server.streamable_http_app(stateless_http=True)
    if args.list_mark or args.list_gate or args.lists:
        app = OnList(app, args.list_mark, args.list_gate, args.lists)
    if args.auth:
        app = RequireAuth(app, args.auth)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
