"""`POST /v1/responses/input_tokens`: the prompt tokens a create with the same body would
take, counted by the engine from the very prompt it would be given (history, references,
tools and all). Nothing is written."""

from __future__ import annotations

import msgspec

from domain.errors import EngineError, InvalidRequest
from service.bundle import Bundle
from service.prompts.build import build_prompt
from service.prompts.engine import engine_prompt
from service.prompts.pipeline import Purpose, prepare_prompt
from service.responses.create import check_served
from service.wire.create_request import CreateRequest


async def count_input_tokens(svc: Bundle, req: CreateRequest, owner: str) -> int:
    model = req.response.model
    check_served(svc, model)
    # What a create would give the engine: cut to the window with `truncation: "auto"`;
    # whole (its count over the window) otherwise, where a create would be refused.
    prepared = await prepare_prompt(svc, req, owner, Purpose.COUNT)
    if prepared.truncation is not None:
        return prepared.truncation.input_tokens
    prompt = build_prompt(prepared.response, prepared.items, prepared.history)
    try:
        return await svc.engine.count_tokens(engine_prompt(prompt))
    except EngineError as exc:
        if exc.code != "tokens_uncountable":
            raise
        raise InvalidRequest(
            f"The engine serving '{model}' cannot count tokens (its upstream has no "
            "tokenizer endpoint).",
            param="model",
            code="unsupported_value",
        ) from exc


class InputTokens(msgspec.Struct, frozen=True, kw_only=True):
    """openai-python `InputTokenCountResponse`."""

    object: str = "response.input_tokens"
    input_tokens: int
