"""The MCP tool loop of a response whose tools include `mcp` servers (docs/mcp.md).

The server lists each server's tools, lets the model generate, runs the MCP call the model
made, feeds the result back and generates again, until the model answers. Every step is
events in the log (domain/mcp.py), appended before the next one starts, so the loop's state
is the log: `ToolLoop.run` starts from whatever the log holds, which is how a process that
takes over a dead one's lease goes on (service/work/sweeper.py): servers already listed are not
listed again, a call whose result is recorded is never run again, and a call that was in
flight when its process died is recorded failed (its effect is unknown).

Headers (`headers`, `authorization`) are secrets: the decoder takes them out of the tool
before anything is stored (service/wire/tools.py) and they reach the log only sealed
under the server's key (`ToolLoop.seal`), opened here when a call needs them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from domain.builtins import (
    builtin_ended,
    builtin_started,
    pending_server_call,
    recipient,
    server_arguments,
)
from domain.errors import EngineError
from domain.events import RequestFacts
from domain.generation import Finished, Prompt, TokenUsage
from domain.mcp import (
    approved_call,
    call_ended,
    call_started,
    calls_made,
    execution_error,
    interrupted,
    list_ended,
    list_started,
    listed,
    lists_sent,
    protocol_error,
)
from domain.objects import (
    CodeInterpreterCall,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    McpListTools,
    WebSearchCall,
)
from domain.state import Decision, ResponseState
from domain.tools import McpServer, OfferedTool, builtin_offered, mcp_offered, mcp_servers
from service.ports import ToolError, ToolServers
from service.prompts.engine import as_input, engine_prompt
from service.reasoning.sealing import Sealer
from service.wire.set_aside import SET_ASIDE

log = logging.getLogger("resplog.mcp")

REDACTED = "<redacted>"
# The source a sealed blob of MCP headers names, so no other blob is taken for one.
SEALED_SOURCE = "mcp-headers"


class ToolLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The operator's bounds on a loop (`--mcp-*` flags, docs/configuration.md)."""

    call_timeout_s: float = 30.0
    loop_timeout_s: float = 300.0
    max_output_bytes: int = 65536
    # The largest tool list (its tools as JSON) kept in the log and shown to the model.
    max_list_bytes: int = 1048576
    # Tools whose calls a takeover may run again when one was in flight as the process
    # running it died (`server_label:name`; the built-ins are `tool_server:python` …).
    idempotent: frozenset[str] = frozenset()


Step = Callable[[Decision], Awaitable[None]]
Generate = Callable[[Prompt], Awaitable[Finished | None]]


def _add(a: TokenUsage, b: TokenUsage) -> TokenUsage:
    return TokenUsage(
        input_tokens=a.input_tokens + b.input_tokens,
        cached_tokens=a.cached_tokens + b.cached_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        reasoning_tokens=a.reasoning_tokens + b.reasoning_tokens,
    )


def passed_back(facts: RequestFacts) -> list[McpListTools]:
    """The MCP tool lists a request's input passed back (set aside in its facts), in the
    input's order: a client that keeps its own history sends an earlier answer's lists."""
    aside = sorted(facts.extra.get(SET_ASIDE, []), key=lambda a: int(a["at"]))
    return lists_sent(a["item"] for a in aside)


def listed_before(prompt: Prompt, facts: RequestFacts | None = None) -> dict[str, McpListTools]:
    """The tool lists in the request's context, the newest of each server (by label) that
    did not fail: those of the earlier turns of the prompt (a `previous_response_id`
    chain's outputs and the lists its requests passed back, or the lists a conversation
    holds: a turn's `listed` and `output`), then those the request's own input passes back
    (set aside in its `facts`). OpenAI lists a server's tools again only when the list is
    no longer in the request's context: a turn that has its list offers the tools from it,
    and lists only servers new to the request. A list cut away by compaction or truncation
    is not in the history, and a server whose newest list failed has none, so either is
    listed again."""
    found: dict[str, McpListTools] = {}
    passed = [] if facts is None else passed_back(facts)
    for item in [*(i for t in prompt.history for i in (*t.listed, *t.output)), *passed]:
        if isinstance(item, McpListTools):
            found.pop(item.server_label, None)
            if item.error is None:
                found[item.server_label] = item
    return found


def _approved(prompt: Prompt, state: ResponseState) -> McpApprovalRequest | None:
    """The next approved request that was not run yet: a request of the turn this one
    continues, or one passed back in the input by a client that keeps its own history (the
    Agents SDK's default sends the request back with its answer). A call passed back that
    names the request was run already."""
    assert state.response is not None
    seen = [
        *(i for t in prompt.history for i in (*t.input, *t.output)),
        *prompt.input,
        *state.response.output,
    ]
    done = {i.approval_request_id for i in seen if isinstance(i, McpCall)}
    asked = {i.id: i for i in seen if isinstance(i, McpApprovalRequest)}
    for item in prompt.input:
        if isinstance(item, McpApprovalResponse) and item.approve:
            request = asked.get(item.approval_request_id)
            if request is not None and request.id not in done:
                return request
    return None


class ToolLoop:
    """Runs the MCP steps of one process's generations."""

    def __init__(
        self,
        servers: ToolServers,
        sealer: Sealer,
        limits: ToolLimits,
        tool_server: str | None = None,
    ) -> None:
        self._servers = servers
        self._sealer = sealer
        self.limits = limits
        self.tool_server = tool_server  # runs gpt-oss's built-ins (domain/builtins.py)

    def builtins(self, tools: list[dict[str, Any]]) -> list[OfferedTool]:
        """The built-ins a response's tools ask for, when there is a tool server."""
        return builtin_offered(tools) if self.tool_server else []

    def runs(self, tools: list[dict[str, Any]]) -> bool:
        """Whether a response with these tools is a tool loop of this process."""
        return bool(mcp_servers(tools) or self.builtins(tools))

    # --- secrets --------------------------------------------------------------------------

    def seal(self, headers: dict[str, dict[str, str]]) -> str:
        """The headers of each server (by label), as one blob for the request's facts."""
        from domain.objects import ReasoningText

        text = json.dumps(headers)
        return self._sealer.seal([], [ReasoningText(text=text)], SEALED_SOURCE)

    def headers(self, facts: RequestFacts | None) -> dict[str, dict[str, str]]:
        blob = None if facts is None else facts.extra.get("mcp_headers_sealed")
        if not isinstance(blob, str):
            return {}
        found = self._sealer.open(blob)
        if found is None or found.source != SEALED_SOURCE or not found.content:
            log.warning("the MCP headers of a response cannot be opened (another key?)")
            return {}
        value = json.loads(found.content[0].text)
        return value if isinstance(value, dict) else {}

    # --- the loop -------------------------------------------------------------------------

    async def run(
        self,
        holder: list[ResponseState],
        prompt: Prompt,
        step: Step,
        generate: Generate,
        finish: Callable[[Finished], Awaitable[None]],
    ) -> None:
        """Drive the loop from the state the log holds to the response's end."""
        state = holder[0]
        assert state.response is not None
        servers = {s.server_label: s for s in mcp_servers(state.response.tools)}
        headers = self.headers(state.facts)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.loop_timeout_s
        builtins = self.builtins(state.response.tools)
        if state.open_index is not None:  # a dead process's loop, taken over
            await step(interrupted(state, self.limits.idempotent))
        known = listed_before(prompt, state.facts)
        await self._list_all(holder, servers, headers, step, known)
        usage = TokenUsage()
        limit = state.response.max_tool_calls
        while True:
            if loop.time() > deadline:
                raise EngineError(
                    f"the tool loop ran past {self.limits.loop_timeout_s:g} s",
                    code="tool_loop_timeout",
                )
            call = pending_server_call(holder[0])
            if isinstance(call, McpCall):
                await self._call(holder, call, servers, headers, step, limit, deadline, known)
                continue
            if call is not None:
                await self._builtin_call(holder, call, step, limit, deadline)
                continue
            request = _approved(prompt, holder[0])
            if request is not None:
                await step(approved_call(holder[0], request))
                continue
            offered = list(prompt.tools)
            if limit is None or calls_made(holder[0]) < limit:
                offered += self.offered(holder[0], servers, known) + builtins
            assert holder[0].response is not None
            so_far = as_input(holder[0].response.output, holder[0])
            nxt = msgspec.structs.replace(
                engine_prompt(prompt), input=[*engine_prompt(prompt).input, *so_far], tools=offered
            )
            finished = await generate(nxt)
            if finished is None:
                continue  # the model called an MCP tool: run it
            usage = _add(usage, finished.usage)
            await finish(msgspec.structs.replace(finished, usage=usage))
            return

    @staticmethod
    def offered(
        state: ResponseState,
        servers: dict[str, McpServer],
        known: dict[str, McpListTools] | None = None,
    ) -> list[OfferedTool]:
        """The MCP tools the model may call: each server's, from this response's list of
        them, else from the list an earlier turn holds (`known`)."""
        out: list[OfferedTool] = []
        for label, item in {**(known or {}), **listed(state)}.items():
            if label in servers and item.error is None:
                out += mcp_offered(servers[label], item.tools)
        return out

    async def _list_all(
        self,
        holder: list[ResponseState],
        servers: dict[str, McpServer],
        headers: dict[str, dict[str, str]],
        step: Step,
        known: dict[str, McpListTools],
    ) -> None:
        """List the tools of every server neither the log of this response nor an earlier
        turn (`known`) has listed yet. The servers are all asked at once, so a response
        with several waits for the slowest, not for their sum; their items are still
        logged one after another, in the order of `tools`. A list changes nothing on its
        server, so asking before its `in_progress` event is logged is safe (a call, which
        may, is asked only after its own)."""
        done = {*listed(holder[0]), *known}
        todo = [s for s in servers.values() if s.server_label not in done]
        asked = [asyncio.ensure_future(self._ask_list(s, headers)) for s in todo]
        try:
            for server, answer in zip(todo, asked, strict=True):
                await step(list_started(holder[0], server.server_label))
                tools, error = await answer
                await step(list_ended(holder[0], tools, error))
        finally:
            for left in asked:
                left.cancel()
            if asked:
                await asyncio.wait(asked)
            for left in asked:  # what one raised after an earlier one ended the loop
                if not left.cancelled():
                    left.exception()

    async def _ask_list(
        self, server: McpServer, headers: dict[str, dict[str, str]]
    ) -> tuple[list[dict[str, Any]] | None, str | None]:
        """The server's tools, or why it gave none. A list over `max_list_bytes` is none:
        it would be in the log several times over (its item, the response's end, every
        later turn's history) and in every prompt of the loop."""
        error: str | None = None
        try:
            tools = await asyncio.wait_for(
                self._servers.list_tools(server.server_url, headers.get(server.server_label, {})),
                self.limits.call_timeout_s,
            )
            size = len(msgspec.json.encode(tools))
            if size <= self.limits.max_list_bytes:
                return tools, None
            error = (
                f"the server's tools ({size} bytes) are over the limit of "
                f"{self.limits.max_list_bytes} bytes"
            )
        except ToolError as exc:
            error = _text(exc.error)
        except TimeoutError:
            error = f"the server did not list its tools within {self.limits.call_timeout_s:g} s"
        log.warning("listing the tools of %s failed: %s", server.server_label, error)
        return None, error

    async def _call(
        self,
        holder: list[ResponseState],
        call: McpCall,
        servers: dict[str, McpServer],
        headers: dict[str, dict[str, str]],
        step: Step,
        limit: int | None,
        deadline: float,
        known: dict[str, McpListTools],
    ) -> None:
        state = holder[0]
        server = servers.get(call.server_label)
        allowed = {
            t.name
            for t in self.offered(state, servers, known)
            if t.server_label == call.server_label
        }
        refusal: dict[str, Any] | None = None
        arguments: Any = None
        if server is None or call.name not in allowed:
            refusal = protocol_error(f"tool {call.name!r} is not offered by {call.server_label!r}")
        elif limit is not None and calls_made(state) > limit:
            refusal = execution_error(f"max_tool_calls ({limit}) reached; the call was not run")
        else:
            try:
                arguments = json.loads(call.arguments or "{}")
            except ValueError:
                arguments = None
            if not isinstance(arguments, dict):
                refusal = protocol_error("the arguments are not a JSON object", code=-32602)
        if refusal is not None or server is None:
            await step(call_ended(state, error=refusal))
            return
        if state.mcp_step is None:
            await step(call_started(state))  # durably, before the server is asked
        loop = asyncio.get_running_loop()
        timeout = max(0.0, min(self.limits.call_timeout_s, deadline - loop.time()))
        output: str | None = None
        error: dict[str, Any] | None = None
        try:
            output = await asyncio.wait_for(
                self._servers.call_tool(
                    server.server_url, headers.get(server.server_label, {}), call.name, arguments
                ),
                timeout,
            )
        except ToolError as exc:
            error = exc.error
        except TimeoutError:
            error = execution_error(f"the call did not return within {timeout:g} s")
        if output is not None and len(output.encode()) > self.limits.max_output_bytes:
            error = execution_error(
                f"the output ({len(output.encode())} bytes) is over the limit "
                f"of {self.limits.max_output_bytes} bytes"
            )
            output = None
        await step(call_ended(holder[0], output=output, error=error))

    async def _builtin_call(
        self,
        holder: list[ResponseState],
        call: WebSearchCall | CodeInterpreterCall,
        step: Step,
        limit: int | None,
        deadline: float,
    ) -> None:
        """Run a built-in call on the tool server, its steps recorded as an MCP call's."""
        arguments = server_arguments(holder[0], call)
        refusal = None
        if arguments is None:
            refusal = "the arguments are not a JSON object"
        elif self.tool_server is None:
            refusal = "no tool server runs the built-in tools here"
        elif limit is not None and calls_made(holder[0]) > limit:
            refusal = f"max_tool_calls ({limit}) reached; the call was not run"
        if refusal is not None or self.tool_server is None or arguments is None:
            await step(builtin_ended(holder[0], output=None, error=refusal))
            return
        if holder[0].mcp_step is None:
            await step(builtin_started(holder[0]))  # durably, before the server is asked
        timeout = max(
            0.0, min(self.limits.call_timeout_s, deadline - asyncio.get_running_loop().time())
        )
        output: str | None = None
        error: str | None = None
        try:
            output = await asyncio.wait_for(
                self._servers.call_tool(self.tool_server, {}, recipient(call), arguments), timeout
            )
        except ToolError as exc:
            error = _text(exc.error)
        except TimeoutError:
            error = f"the call did not return within {timeout:g} s"
        if output is not None and len(output.encode()) > self.limits.max_output_bytes:
            error = f"the output ({len(output.encode())} bytes) is over the limit"
            error += f" of {self.limits.max_output_bytes} bytes"
            output = None
        await step(builtin_ended(holder[0], output=output, error=error))


def _text(error: dict[str, Any]) -> str:
    if "message" in error:
        return str(error["message"])
    parts = error.get("content") or []
    return " ".join(str(p.get("text", "")) for p in parts if isinstance(p, dict)) or str(error)
