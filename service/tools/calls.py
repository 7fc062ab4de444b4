"""Tool calls as OpenAI streams them, whatever the engine rendered.

Engines announce every offered tool as a function (domain/tools.py): a namespaced one by its
qualified name, a custom one as a function of one string parameter. `tool_calls` turns the
engine's calls back into the client's terms: the tool's own name and namespace, and for a
custom tool a `custom_tool_call` whose input is the text, so its arguments are held until
the call ends and sent as one `InputDelta`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

import msgspec

from domain.generation import (
    AnyDelta,
    ApprovalRequest,
    ArgumentsDelta,
    BrowserCall,
    EndItem,
    FunctionCallStart,
    InputDelta,
)
from domain.tools import OfferedTool, custom_input, resolve


def tool_calls(
    deltas: AsyncGenerator[AnyDelta, None], tools: list[OfferedTool]
) -> AsyncGenerator[AnyDelta, None]:
    """The engine's deltas with each call named as the client declared the tool (an
    engine that knows custom tools itself, like the scripted one, yields
    `FunctionCallStart(custom=True)` and `InputDelta` directly: those pass through).
    Closing this generator closes the engine's, which aborts the generation there.

    With no tool offered there is nothing to rename or hold (engines set no `builtin` or
    `approval` of their own: those come from the offered tools), so the engine's deltas are
    returned as they are, without three generators' steps on every token."""
    if not tools:
        return deltas
    return _renamed(deltas, tools)


async def _renamed(
    deltas: AsyncGenerator[AnyDelta, None], tools: list[OfferedTool]
) -> AsyncGenerator[AnyDelta, None]:
    try:
        async for delta in _named(deltas, tools):
            yield delta
    finally:
        await deltas.aclose()


async def _named(
    deltas: AsyncIterator[AnyDelta], tools: list[OfferedTool]
) -> AsyncGenerator[AnyDelta, None]:
    async for delta in _whole(_custom(deltas, tools)):
        yield delta


async def _whole(deltas: AsyncIterator[AnyDelta]) -> AsyncGenerator[AnyDelta, None]:
    """Calls the client sees whole, with no deltas, are held until their arguments end: an
    MCP tool's call that waits for approval (`OfferedTool.approval`) becomes one
    `ApprovalRequest` (an `mcp_approval_request`), a `browser.*` call one `BrowserCall`
    (a `web_search_call`, whose action needs the whole arguments)."""
    held: tuple[FunctionCallStart, list[str]] | None = None
    async for delta in deltas:
        if held is not None:
            if isinstance(delta, ArgumentsDelta):
                held[1].append(delta.text)
                continue
            yield _released(*held)
            held = None
            if isinstance(delta, EndItem):
                continue
        if isinstance(delta, FunctionCallStart) and (delta.approval or delta.builtin == "browser"):
            held = (delta, [])
            continue
        yield delta
    if held is not None:
        yield _released(*held)


def _released(start: FunctionCallStart, parts: list[str]) -> AnyDelta:
    if start.builtin == "browser":
        return BrowserCall(name=start.name, arguments="".join(parts))
    assert start.server_label is not None
    return ApprovalRequest(
        server_label=start.server_label, name=start.name, arguments="".join(parts)
    )


async def _custom(
    deltas: AsyncIterator[AnyDelta], tools: list[OfferedTool]
) -> AsyncGenerator[AnyDelta, None]:
    held: list[str] | None = None
    async for delta in deltas:
        if held is not None and isinstance(delta, ArgumentsDelta):
            held.append(delta.text)
            continue
        if held is not None:
            yield InputDelta(text=custom_input("".join(held)))
            held = None
        if isinstance(delta, FunctionCallStart) and not delta.custom and delta.namespace is None:
            tool = resolve(tools, delta.name)
            if tool is not None:
                delta = msgspec.structs.replace(
                    delta,
                    name=tool.name,
                    namespace=tool.namespace,
                    custom=tool.custom,
                    server_label=tool.server_label,
                    approval=tool.approval,
                    builtin=tool.builtin,
                )
                held = [] if tool.custom else None
        yield delta
    if held is not None:
        yield InputDelta(text=custom_input("".join(held)))
