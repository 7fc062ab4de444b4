"""What this process can do now: readiness (the database reachable and migrated, the
engine answering) and the models its engine serves."""

from __future__ import annotations

from typing import Literal

import msgspec

from domain.errors import NotFound
from service.bundle import Bundle


class Health(msgspec.Struct, frozen=True):
    status: str
    database: str | None = None
    engine: str | None = None


async def readiness(svc: Bundle) -> Health:
    """Ready when the database is reachable and migrated and the engine answers."""
    database = await svc.database.ready()
    engine_ok = await svc.engine.ready()
    ok = database is None and engine_ok
    return Health(
        status="ready" if ok else "unavailable",
        database=database or "ok",
        engine="ok" if engine_ok else "not answering",
    )


class Model(msgspec.Struct, frozen=True):
    id: str
    owned_by: str
    object: Literal["model"] = "model"
    created: int = 0


class ModelList(msgspec.Struct, frozen=True):
    data: list[Model]
    object: Literal["list"] = "list"


def list_models(svc: Bundle) -> ModelList:
    """The models the engine serves, as OpenAI's model list."""
    engine = svc.engine
    return ModelList(data=[Model(id=m, owned_by=f"resplog-{engine.name}") for m in engine.models()])


def retrieve_model(svc: Bundle, model: str) -> Model:
    """One model a create may name (openai-python `client.models.retrieve`): any the
    engine serves, listed or not (the scripted engine takes any name); else OpenAI's 404."""
    if not svc.engine.serves(model):
        raise NotFound(
            f"The model '{model[:256]}' does not exist or you do not have access to it.",
            param="model",
            code="model_not_found",
        )
    return Model(id=model, owned_by=f"resplog-{svc.engine.name}")
