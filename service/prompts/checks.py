"""The input checks of a create: an input its engine could not be given is refused before
anything is written (OpenAI's 400s): a tool output that answers no call of the
conversation, an image or a file for a text-only engine.
"""

from __future__ import annotations

from collections.abc import Sequence

from domain.errors import InvalidRequest
from domain.generation import Turn
from domain.objects import (
    CustomToolCall,
    CustomToolCallOutput,
    FunctionCall,
    FunctionCallOutput,
    InputCustomToolCall,
    InputFile,
    InputFunctionCall,
    InputImage,
    InputItem,
    InputMessage,
    OutputItem,
)
from service.bundle import Bundle


def check_calls(history: list[Turn], items: list[InputItem]) -> None:
    """Every tool output answers a call the conversation holds (OpenAI's 400), rather than
    a response that fails when its engine cannot render the orphan."""
    answers = [i for i in items if isinstance(i, FunctionCallOutput | CustomToolCallOutput)]
    if not answers:
        return
    # Sought newest first, the turns read only until every answer's call is found: a tool
    # output answers the turn before it, nearly always, however long the chain.
    missing = {i.call_id for i in answers} - _calls(items)
    for turn in reversed(history):
        if not missing:
            break
        missing -= _calls([*turn.input, *turn.output])
    for item in answers:
        if item.call_id in missing:
            raise InvalidRequest(
                f"No tool call found for function call output with call_id {item.call_id[:80]}.",
                param="input",
                code=None,
            )


def _calls(items: Sequence[InputItem | OutputItem]) -> set[str]:
    return {
        item.call_id
        for item in items
        if isinstance(item, InputFunctionCall | FunctionCall | InputCustomToolCall | CustomToolCall)
    }


def check_media(svc: Bundle, model: str, items: list[InputItem]) -> None:
    """Refuse, before anything is written, images or files an engine cannot be given."""
    kinds = {
        "image" if isinstance(part, InputImage) else "file"
        for item in items
        if isinstance(item, InputMessage)
        for part in item.content
        if isinstance(part, InputImage | InputFile)
    }
    for kind in sorted(kinds - svc.engine.media):
        raise InvalidRequest(
            f"The model '{model}' does not take {kind} input on this server (its engine, "
            f"{svc.engine.name}, is text only).",
            param="input",
            code="unsupported_value",
        )
