"""`POST /v1/responses/input_tokens`: the prompt tokens a create with the same body would
take, counted by the engine from the very prompt it would be given (history, references,
tools and all). Nothing is written."""

from __future__ import annotations

import msgspec

from domain.errors import EngineError, InvalidRequest
from service.bundle import Bundle
from service.prompts.history import history_for
from service.prompts.references import resolve_references
from service.prompts.window import fit
from service.reasoning.sealing import check_sealed
from service.responses.create import assign_ids, build_prompt, check_served
from service.tools.mcploop import engine_prompt
from service.wire.create_request import CreateRequest

# A prompt is made for a response id; this one is never stored, nor given out.
_UNSTORED = "resp_" + "0" * 32


async def count_input_tokens(svc: Bundle, req: CreateRequest, owner: str) -> int:
    model = req.response.model
    check_served(svc, model)
    history = await history_for(svc, req.response, owner, req.input)
    items = assign_ids(_UNSTORED, await resolve_references(svc, req.input, owner))
    check_sealed(svc.sealer, items)
    response = msgspec.structs.replace(req.response, id=_UNSTORED)
    try:
        # What a create would give the engine: cut to the window with `truncation: "auto"`;
        # whole (its count over the window) otherwise, where a create would be refused.
        fitted = await fit(svc, response, history, items, refuse=False)
        if fitted.truncation is not None:
            return fitted.truncation.input_tokens
        return await svc.engine.count_tokens(engine_prompt(build_prompt(response, items, history)))
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
