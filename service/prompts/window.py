"""The window stage: a prompt too long for the model is refused before the request is
written (`truncation: "disabled"`, OpenAI's default), or cut to fit (`"auto"`,
`domain/truncation.py`), the cut recorded in the request's facts.

The window is the engine's (sglang's `context_length`, vLLM's `max_model_len`) or the
operator's `--context-window`, the smaller of the two. Counting costs a rendering (a round
trip for a chat upstream's `/tokenize`), so a prompt is counted only when a bound says it
might not fit: every token of a byte-level BPE vocabulary stands for at least one byte of
text, and the prompt's JSON holds all its text plus more structure than any chat template
adds per message, so its length (plus a margin for the template's fixed text and for
images, which a vision model counts apart from their bytes) is never below the count.
"""

from __future__ import annotations

import logging
import operator

import msgspec

from domain.errors import EngineError, InvalidRequest
from domain.generation import History, Prompt, Turn
from domain.objects import InputImage, InputItem, InputMessage, ResponseObject
from domain.truncation import Truncation, at, cut, steps
from service.bundle import Bundle
from service.prompts.build import build_prompt
from service.prompts.engine import engine_prompt

log = logging.getLogger("resplog.context")

_MARGIN = 1024  # a chat template's fixed text (harmony's system message: about 60 tokens)
_PER_IMAGE = 8192  # the most any vision encoder here gives one image


def too_long() -> InvalidRequest:
    # OpenAI's words and code for a prompt over the window.
    return InvalidRequest(
        "Your input exceeds the context window of this model. Please adjust your input and "
        "try again.",
        param="input",
        code="context_length_exceeded",
    )


def window_for(svc: Bundle, model: str) -> int | None:
    """The model's context window here: the engine's, the operator's, or the smaller."""
    known = [w for w in (svc.engine.context_window(model), svc.context_window) if w]
    return min(known) if known else None


class Fitted(msgspec.Struct, frozen=True, kw_only=True):
    history: list[Turn]
    items: list[InputItem]
    truncation: Truncation | None = None  # set when something was dropped


async def fit(
    svc: Bundle,
    response: ResponseObject,
    history: list[Turn],
    items: list[InputItem],
    *,
    refuse: bool = True,
) -> Fitted:
    """The conversation as the engine will be given it. A prompt over the window is cut
    when `response.truncation` is `auto`; otherwise it is `too_long()` (or, with `refuse`
    false, as for counting tokens, given back whole)."""
    whole = Fitted(history=history, items=items)
    window = window_for(svc, response.model)
    if window is None:
        return whole
    prompt = _prompt(response, history, items)
    if _bound(prompt) <= window:
        return whole
    tokens = await _count(svc, prompt)
    if tokens is None or tokens <= window:
        return whole
    if response.truncation != "auto":
        if refuse:
            raise too_long()
        return whole
    # The smallest cut that fits: fewer tokens the more is dropped, so a binary search.
    lo, hi, best = 1, steps(history, items), None
    while lo <= hi:
        mid = (lo + hi) // 2
        turns, count = at(history, mid)
        trial = cut(history, items, turns, count)
        n = await _count(svc, _prompt(response, trial.history, trial.items))
        if n is not None and n <= window:
            best, hi = (mid, n, trial), mid - 1
        else:
            lo = mid + 1
    if best is None:  # even the last input item alone is over the window
        raise too_long()
    step, n, trial = best
    turns, count = at(history, step)
    return Fitted(
        history=trial.history,
        items=trial.items,
        truncation=Truncation(
            dropped_turns=turns, dropped_items=count, input_tokens=n, context_window=window
        ),
    )


def _prompt(response: ResponseObject, history: list[Turn], items: list[InputItem]) -> Prompt:
    return build_prompt(response, items, history)


def _bound(prompt: Prompt) -> int:
    history = prompt.history
    if not isinstance(history, History):
        size = len(msgspec.json.encode(prompt))
        images = _images(prompt.input) + sum(_images(t.input) for t in history)
        return size + _MARGIN + _PER_IMAGE * images
    # A chain's history carries its turns' JSON lengths (`History.running`): the prompt's
    # JSON is the rest of it with `"history":[]`, plus each turn and a comma between two.
    rest = len(msgspec.json.encode(msgspec.structs.replace(prompt, history=[])))
    turns: int = history.running("window.bytes", _json_length, operator.add)
    shown: int = history.running("window.images", _turn_images, operator.add)
    size = rest + turns + len(history) - 1
    return size + _MARGIN + _PER_IMAGE * (_images(prompt.input) + shown)


def _json_length(turn: Turn) -> int:
    return len(msgspec.json.encode(turn))


def _turn_images(turn: Turn) -> int:
    return _images(turn.input)


def _images(items: list[InputItem]) -> int:
    return sum(
        1
        for item in items
        if isinstance(item, InputMessage)
        for part in item.content
        if isinstance(part, InputImage)
    )


async def _count(svc: Bundle, prompt: Prompt) -> int | None:
    """The engine's count, or None when it cannot count now (the engine then meets the
    prompt as it is, and fails it if it is too long)."""
    try:
        return await svc.engine.count_tokens(engine_prompt(prompt))
    except EngineError as exc:
        log.warning("cannot check the context window of %s: %s", prompt.response_id, exc)
        return None
