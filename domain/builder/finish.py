"""How the engine finished, as events: what is open closed, then `completed`, or
`incomplete` if it was cut off; its token counts as OpenAI reports them."""

from __future__ import annotations

from typing import Literal

from domain.batch import Batch, require
from domain.builder.items import close_item
from domain.events import EndFacts, ResponseCompleted, ResponseIncomplete
from domain.fold.lifecycle import terminal_snapshot
from domain.generation import Finished, TokenUsage
from domain.objects import IncompleteDetails, InputTokensDetails, OutputTokensDetails, Usage
from domain.state import Decision, ResponseState


def finish(state: ResponseState, finished: Finished, *, now: int) -> Decision:
    """The engine finished: close what is open; `completed`, or `incomplete` if cut off."""
    require(state, "in_progress")
    batch = Batch(state)
    usage = to_usage(finished.usage)
    if finished.reason == "stop":
        _complete(batch, usage, now)
    else:
        _cut_off(
            batch, usage, "max_output_tokens" if finished.reason == "length" else "content_filter"
        )
    return batch.decision()


def to_usage(usage: TokenUsage) -> Usage:
    """An engine's token counts as OpenAI reports them."""
    return Usage(
        input_tokens=usage.input_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=usage.cached_tokens),
        output_tokens=usage.output_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=usage.reasoning_tokens),
        total_tokens=usage.input_tokens + usage.output_tokens,
    )


def _complete(batch: Batch, usage: Usage, now: int) -> None:
    close_item(batch)
    final = terminal_snapshot(
        batch.response,
        "completed",
        completed_at=now,
        usage=usage,
        error=None,
        incomplete_details=None,
    )
    batch.add(lambda n: ResponseCompleted(sequence_number=n, response=final))


def _cut_off(
    batch: Batch, usage: Usage, why: Literal["max_output_tokens", "content_filter"]
) -> None:
    close_item(batch, "incomplete")
    final = terminal_snapshot(
        batch.response,
        "incomplete",
        completed_at=None,
        usage=usage,
        error=None,
        incomplete_details=IncompleteDetails(reason=why),
    )
    facts = EndFacts(reason=why)
    batch.add(lambda n: ResponseIncomplete(sequence_number=n, response=final, facts=facts))
