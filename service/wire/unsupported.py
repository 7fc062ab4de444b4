"""The create fields of OpenAI's API resplog does not act on: refused with a clear 400,
taken only at the value it follows anyway, or kept in the facts as ignored (`moderation`
checked for its shape first)."""

from __future__ import annotations

from typing import Any

from domain.errors import InvalidRequest

# Fields of OpenAI's API resplog refuses with a clear message instead of ignoring (none
# today: each field of openai-python's `ResponseCreateParams` is acted on, taken at its
# default, or kept as ignored).
UNSUPPORTED_FIELDS: dict[str, str] = {}
# Options of openai-python's `ResponseCreateParams` taken only at the value that asks for
# what this server does anyway (it compresses no image context; it has no access program
# but the standard one): accepted and kept in the request's facts as ignored; any other
# value is a 400 naming it. {field: (key, the values taken, why another is refused)}.
DEFAULT_ONLY = {
    "image": (
        "context_compression",
        ("auto", "disabled"),
        "this server does not compress image context",
    ),
    "access_programs": (
        "cyber",
        ("standard",),
        "this server has no access program but the standard one",
    ),
}
# Fields of openai-python's `ResponseCreateParams` that resplog accepts and does not act on:
# hints about caching and background handling, and `moderation` (OpenAI runs a moderation
# model on the input and output; no such model is served here, so nothing is moderated and
# the response carries no `moderation` results). Kept verbatim in the request's facts
# (`extra.ignored`), so the log shows what was asked and not done; listed in docs/api.md.
IGNORED_FIELDS = ("background_options", "prompt_cache_options", "moderation")
# openai-python `response_create_params.py` `Moderation`: a model, and a policy of `mode`s.
_MODERATION_MODES = ("score", "block")


def refuse_unsupported(raw: dict[str, Any]) -> None:
    """OpenAI fields resplog lacks get a 400 saying so, not "unknown"; the ones it ignores
    are kept for the facts (`IGNORED_FIELDS`, `take_defaults_only`)."""
    for name, why in UNSUPPORTED_FIELDS.items():
        if name in raw and raw[name] is not None:
            raise InvalidRequest(
                f"Unsupported parameter: '{name}': {why}.", param=name, code="unsupported_parameter"
            )


def check_moderation(value: Any) -> None:
    """`moderation` of the shape openai-python's `Moderation` has (it is kept, not run), so
    that a request OpenAI would refuse is refused here too."""
    if value is None:
        return
    if not isinstance(value, dict) or not isinstance(value.get("model"), str):
        raise InvalidRequest(
            "Missing required parameter: 'moderation.model'."
            if isinstance(value, dict)
            else "Invalid 'moderation': expected an object.",
            param="moderation.model" if isinstance(value, dict) else "moderation",
            code="missing_required_parameter" if isinstance(value, dict) else "invalid_type",
        )
    _known("moderation", value, ("model", "policy"))
    policy = value.get("policy")
    if policy is None:
        return
    _known("moderation.policy", policy, ("input", "output"))
    for side in ("input", "output"):
        rule = policy.get(side)
        if rule is None:
            continue
        _known(f"moderation.policy.{side}", rule, ("mode",))
        if rule.get("mode") not in _MODERATION_MODES:
            raise InvalidRequest(
                f"Invalid value for 'moderation.policy.{side}.mode': expected one of "
                "'score', 'block'.",
                param=f"moderation.policy.{side}.mode",
                code="invalid_value",
            )


def _known(name: str, value: Any, keys: tuple[str, ...]) -> None:
    if not isinstance(value, dict):
        raise InvalidRequest(
            f"Invalid '{name}': expected an object.", param=name, code="invalid_type"
        )
    for key in value:
        if key not in keys:
            raise InvalidRequest(
                f"Unknown parameter: '{name}.{key}'.",
                param=f"{name}.{key}",
                code="unknown_parameter",
            )


def take_defaults_only(raw: dict[str, Any]) -> dict[str, Any]:
    """The `DEFAULT_ONLY` options of `raw`, taken out of it, each at a value this server
    follows anyway; another value is a 400 naming it."""
    taken = {}
    for name, (key, values, why) in DEFAULT_ONLY.items():
        value = raw.pop(name, None)
        if value is None:
            continue
        if not isinstance(value, dict) or set(value) - {key}:
            unknown = sorted(set(value) - {key}) if isinstance(value, dict) else []
            param = f"{name}.{unknown[0]}" if unknown else name
            raise InvalidRequest(
                f"Unknown parameter: '{param}'."
                if unknown
                else f"Invalid '{name}': expected an object.",
                param=param,
                code="unknown_parameter" if unknown else "invalid_type",
            )
        if value.get(key, values[0]) not in values:
            raise InvalidRequest(
                f"Unsupported value for '{name}.{key}': {str(value[key])[:64]!r}; {why}.",
                param=f"{name}.{key}",
                code="unsupported_value",
            )
        taken[name] = value
    return taken
