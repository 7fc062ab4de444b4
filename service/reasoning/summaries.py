"""`reasoning.summary` (`auto`, `concise`, `detailed`) for engines whose reasoning comes
without a summary: gpt-oss's analysis channel, a chat upstream's `reasoning_content`.

When a reasoning item ends (the next delta is not reasoning), the same engine is asked, in
a short generation of its own, to summarise what the item said; its answer streams into
the item as summary text (`response.reasoning_summary_part.added`,
`response.reasoning_summary_text.delta/.done`, `..._part.done`), before the answer goes
on. So the summary is in the log like every other token, replayed as it was streamed. An
engine that summarises its own reasoning is left alone. The summary's tokens count in the
response's `output_tokens` and `reasoning_tokens` (it is generated work, done for the
reasoning). A summary that fails is logged and left out: the answer matters more.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator

import msgspec

from domain.errors import EngineError
from domain.generation import (
    AnyDelta,
    Finished,
    Prompt,
    ReasoningDelta,
    SummaryDelta,
    TextDelta,
    TokenUsage,
)
from domain.objects import InputMessage, InputText, ReasoningConfig, TextConfig
from service.ports import Engine
from service.reasoning.delegating import DelegatingEngine

log = logging.getLogger("resplog.summaries")

_HOW = {
    "concise": "in one or two short sentences",
    "auto": "in a few sentences",
    "detailed": "in a short paragraph that keeps each step of it",
}


def instructions(level: str) -> str:
    return (
        "Below is the reasoning you wrote while working on a request. Summarize it "
        f"{_HOW.get(level, _HOW['auto'])}, in the first person, for the user to read. "
        "Write only the summary."
    )


class ReasoningSummaries(DelegatingEngine):
    """The wrapped engine, with a summary streamed into each reasoning item that has none
    when the request asks for summaries; `max_tokens` bounds each (0: never summarise)."""

    def __init__(self, engine: Engine, max_tokens: int) -> None:
        super().__init__(engine)
        self.max_tokens = max_tokens

    def generate(self, prompt: Prompt) -> AsyncGenerator[AnyDelta, None]:
        deltas = self.inner.generate(prompt)
        if prompt.reasoning.summary is None or self.max_tokens <= 0:
            return deltas
        return self._summarised(prompt, deltas)

    async def _summarised(
        self, prompt: Prompt, deltas: AsyncGenerator[AnyDelta, None]
    ) -> AsyncGenerator[AnyDelta, None]:
        reasoning: list[str] | None = None  # the open reasoning item's text
        has_summary = False
        spent = 0
        async with contextlib.aclosing(deltas):
            async for delta in deltas:
                if isinstance(delta, ReasoningDelta | SummaryDelta):
                    if reasoning is None:
                        reasoning, has_summary = [], False
                    if isinstance(delta, SummaryDelta):
                        has_summary = True
                    else:
                        reasoning.append(delta.text)
                elif reasoning is not None:  # the item ends here
                    if not has_summary and "".join(reasoning).strip():
                        async for part in self._summary(prompt, "".join(reasoning)):
                            if isinstance(part, int):
                                spent += part
                            else:
                                yield part
                    reasoning = None
                if isinstance(delta, Finished) and spent:
                    usage = delta.usage
                    delta = msgspec.structs.replace(
                        delta,
                        usage=msgspec.structs.replace(
                            usage,
                            output_tokens=usage.output_tokens + spent,
                            reasoning_tokens=usage.reasoning_tokens + spent,
                        ),
                    )
                yield delta

    async def _summary(self, prompt: Prompt, text: str) -> AsyncGenerator[SummaryDelta | int, None]:
        """The summary as summary deltas, then the tokens it took."""
        level = prompt.reasoning.summary or "auto"
        ask = Prompt(
            response_id=prompt.response_id,
            model=prompt.model,
            instructions=instructions(level),
            history=[],
            input=[InputMessage(id="", role="user", content=[InputText(text=text)])],
            tools=[],
            tool_choice="none",
            parallel_tool_calls=False,
            max_output_tokens=self.max_tokens,
            temperature=None,
            top_p=None,
            reasoning=ReasoningConfig(effort="low"),
            text=TextConfig(),
        )
        usage = TokenUsage()
        try:
            async with contextlib.aclosing(self.inner.generate(ask)) as summary:
                async for delta in summary:
                    if isinstance(delta, TextDelta) and delta.text:
                        yield SummaryDelta(text=delta.text)
                    elif isinstance(delta, Finished):
                        usage = delta.usage
        except EngineError as exc:
            log.warning("no reasoning summary for %s: %s", prompt.response_id, exc)
        yield usage.output_tokens
