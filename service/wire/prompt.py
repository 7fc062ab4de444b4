"""A create's `prompt` (openai-python `types/responses/response_prompt_param.py`) as the
`PromptRef` the response echoes; the template it names is read and rendered later, before
anything is written (service/prompts/template.py)."""

from __future__ import annotations

from domain.errors import InvalidRequest
from domain.objects import InputFile, InputImage, InputText, PromptRef
from service.wire.limits import Limits, check_text, short
from service.wire.parts import read_part
from service.wire.request import PromptParam

# A template names few variables; a request that gives more is refused before it is read.
MAX_VARIABLES = 64


def read_prompt(p: PromptParam | None, limits: Limits) -> PromptRef | None:
    """The prompt a request names, each variable checked as a part of the input is. An id
    or version that names no template is OpenAI's 400 when the template is read."""
    if p is None:
        return None
    short("prompt.id", p.id, 256)
    short("prompt.version", p.version, 64)
    given = p.variables or {}
    if len(given) > MAX_VARIABLES:
        raise InvalidRequest(
            f"Invalid 'prompt.variables': too many variables ({len(given)}; the limit is "
            f"{MAX_VARIABLES}).",
            param="prompt.variables",
            code="object_above_max_properties",
        )
    variables: dict[str, str | InputText | InputImage | InputFile] = {}
    for name, value in given.items():
        param = f"prompt.variables.{name[:64]}"
        if isinstance(value, str):
            check_text(param, value, limits)
            variables[name] = value
            continue
        part = read_part(value, param, limits)
        assert isinstance(part, InputText | InputImage | InputFile)  # what these params make
        variables[name] = part
    return PromptRef(
        id=p.id, variables=None if p.variables is None else variables, version=p.version
    )
