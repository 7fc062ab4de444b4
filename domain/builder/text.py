"""Text deltas (the answer, a refusal, reasoning, a summary) into the message or reasoning
item they stream into, opened as needed; a reasoning item closed with its sealed content."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import msgspec
from msgspec import UNSET

from domain.batch import Batch
from domain.builder.items import item_id, open_new_item
from domain.builder.parts import add_summary, add_text, close_part
from domain.errors import InvalidTransition
from domain.events import OutputItemDone
from domain.generation import (
    AnyDelta,
    ReasoningDelta,
    ReasoningSealed,
    RefusalDelta,
    SummaryDelta,
    TextDelta,
)
from domain.objects import (
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningText,
    Refusal,
    phase_of,
)

replace = msgspec.structs.replace


Phase = Literal["commentary", "final_answer"] | None  # None: the engine did not say


def _text(batch: Batch, delta: TextDelta) -> None:
    # Empty text with logprobs is still a delta: the scores of the last tokens of an answer
    # cut mid-character, whose text never completed, are the client's too.
    if delta.text or delta.logprobs:
        _ensure_message(batch, delta.phase)
        add_text(batch, delta.text, OutputText(text=""), delta.logprobs)


def _refusal(batch: Batch, delta: RefusalDelta) -> None:
    if delta.text:
        _ensure_message(batch, _open_message_phase(batch))
        add_text(batch, delta.text, Refusal(refusal=""))


def _reasoning(batch: Batch, delta: ReasoningDelta) -> None:
    if delta.text:
        _ensure_reasoning(batch)
        add_text(batch, delta.text, ReasoningText(text=""))


def _summary(batch: Batch, delta: SummaryDelta) -> None:
    if delta.text:
        _ensure_reasoning(batch)
        add_summary(batch, delta.text)


def _sealed(batch: Batch, delta: ReasoningSealed) -> None:
    """Close the open reasoning item with its sealed content in `output_item.done`."""
    i = batch.state.open_index
    item = batch.response.output[i] if i is not None else None
    if not isinstance(item, ReasoningItem) or i is None:
        raise InvalidTransition(f"response {batch.response.id}: sealed reasoning with no item")
    close_part(batch)
    closed = batch.response.output[i]
    done = replace(closed, status="completed", encrypted_content=delta.encrypted_content)
    batch.add(lambda n: OutputItemDone(sequence_number=n, output_index=i, item=done))


def _ensure_message(batch: Batch, phase: Phase) -> None:
    """The open item, if it is a message of this phase; else a new one."""
    i = batch.state.open_index
    if i is not None:
        item = batch.response.output[i]
        if isinstance(item, OutputMessage) and phase_of(item) == phase:
            return
    rid, n = batch.response.id, len(batch.response.output)
    open_new_item(
        batch,
        OutputMessage(
            id=item_id(rid, "msg", n),
            status="in_progress",
            content=[],
            phase=UNSET if phase is None else phase,
        ),
    )


def _open_message_phase(batch: Batch) -> Phase:
    """A refusal joins the open message whatever its phase."""
    i = batch.state.open_index
    if i is not None:
        item = batch.response.output[i]
        if isinstance(item, OutputMessage):
            return phase_of(item)
    return None


def _ensure_reasoning(batch: Batch) -> None:
    i = batch.state.open_index
    if i is not None and isinstance(batch.response.output[i], ReasoningItem):
        return
    rid, n = batch.response.id, len(batch.response.output)
    open_new_item(batch, ReasoningItem(id=item_id(rid, "rs", n), status="in_progress"))


# The deltas this module builds, each by a builder typed for its class (emit.py dispatches).
BUILDERS: dict[type[AnyDelta], Callable[[Batch, Any], None]] = {
    TextDelta: _text,
    RefusalDelta: _refusal,
    ReasoningDelta: _reasoning,
    SummaryDelta: _summary,
    ReasoningSealed: _sealed,
}
