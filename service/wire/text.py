"""How the answer is to be written: a create's `text` (format, verbosity) and
`reasoning` settings as the domain's `TextConfig` and `ReasoningConfig`."""

from __future__ import annotations

from domain.objects import (
    FormatJsonObject,
    FormatJsonSchema,
    FormatText,
    ReasoningConfig,
    TextConfig,
    TextFormat,
)
from service.wire.limits import Limits, check_size, check_text, short
from service.wire.request import (
    FormatJsonObjectParam,
    FormatJsonSchemaParam,
    ReasoningParam,
    TextParam,
)


def read_reasoning(r: ReasoningParam | None) -> ReasoningConfig:
    """`reasoning` as the domain's `ReasoningConfig` (its default when absent)."""
    if r is None:
        return ReasoningConfig()
    return ReasoningConfig(
        effort=r.effort,
        summary=r.summary or r.generate_summary,
        context=r.context,
        mode=short("reasoning.mode", r.mode, 64),
    )


def read_text(t: TextParam | None, limits: Limits) -> TextConfig:
    """`text` as the domain's `TextConfig`, its JSON schema bounded like a tool's."""
    if t is None:
        return TextConfig()
    if t.format is None:
        return TextConfig(verbosity=t.verbosity)
    fmt: TextFormat
    match t.format:
        case FormatJsonSchemaParam(name=name, schema=schema, description=d, strict=s):
            check_size("text.format.schema", schema, limits)
            check_text("text.format.description", d, limits)
            # `strict` echoes as false when unset (OpenAI's default; the Open Responses
            # schema wants a boolean).
            fmt = FormatJsonSchema(name=name, schema=schema, description=d, strict=bool(s))
        case FormatJsonObjectParam():
            fmt = FormatJsonObject()
        case _:
            fmt = FormatText()
    return TextConfig(format=fmt, verbosity=t.verbosity)
