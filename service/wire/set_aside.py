"""The input items no engine is given (tools OpenAI hosts, listings passed back): their
kinds, and where the request's facts keep them as sent."""

from __future__ import annotations

from typing import Any

from service.wire.request import InputItemParam, SetAsideItemParam

# Input items OpenAI takes (openai-python 3.60 `ResponseInputItemParam`) that no engine here
# is given: the calls and outputs of tools OpenAI hosts or a client runs outside the
# function/custom kinds, MCP listings passed back, and the like. They
# are accepted (a client passing back an earlier answer's output must not get a 400), kept
# in the request's facts under `SET_ASIDE` (so `input_items` lists them, in place, as sent)
# and left out of every prompt; docs/clients.md. (An MCP call or approval request passed
# back is an input item of its own: the next model is shown the call, and the loop finds
# the request an approval answers.)
SET_ASIDE_TYPES = frozenset(
    {
        "additional_tools",
        "apply_patch_call",
        "apply_patch_call_output",
        "code_interpreter_call",
        "computer_call",
        "computer_call_output",
        "configuration_update",
        "file_search_call",
        "image_generation_call",
        "local_shell_call",
        "local_shell_call_output",
        "mcp_list_tools",
        "program",
        "program_output",
        "shell_call",
        "shell_call_output",
        "tool_search_call",
        "tool_search_output",
        "web_search_call",
    }
)
SET_ASIDE = "input_set_aside"  # the key of the request facts' `extra` that keeps them


def set_aside_items(given: str | list[InputItemParam] | None) -> list[dict[str, Any]]:
    """The set-aside input items with their index in the request's input (`at`)."""
    if not isinstance(given, list):
        return []
    return [
        {"at": i, "item": item.item}
        for i, item in enumerate(given)
        if isinstance(item, SetAsideItemParam)
    ]
