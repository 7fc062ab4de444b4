"""Prompt templates (OpenAI's reusable prompts, `prompt` of a create): a template's stream
of versions in the log (`pmpt_…`), and the rendering of one version with a request's
variables into the instructions and messages the response starts from.

A template is instructions and messages whose text may hold `{{name}}` placeholders. A
variable given as text (a string or an `input_text`) replaces its placeholders wherever they
are; one given as an image or a file (`input_image`, `input_file`: openai-python
`types/responses/response_prompt_param.py` `Variables`) takes the place of its placeholder
in a message's text as a part of its own, and cannot stand in the instructions (a string).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

import msgspec

from domain.errors import InvalidRequest
from domain.objects import InputFile, InputImage, InputMessage, InputPart, InputText, OutputText

# What a request's variable may be: text, or a part of a message (as `PromptRef` echoes it).
Variable = str | InputText | InputImage | InputFile

# `{{ name }}`: a name of letters, digits, `_`, `-` and `.`, spaces around it allowed.
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_][A-Za-z0-9_.-]*)\s*\}\}")


class PromptTemplate(msgspec.Struct, frozen=True, kw_only=True):
    """One version of a template: instructions, and messages that come before the input of
    a request that names it (their ids are given by the response, as its input's are)."""

    instructions: str | None = None
    input: list[InputMessage] = msgspec.field(default_factory=list)

    def placeholders(self) -> list[str]:
        """The names its placeholders hold, each once, in their order."""
        texts = [self.instructions or ""] + [t for m in self.input for t in _texts(m.content)]
        return list(dict.fromkeys(n for t in texts for n in PLACEHOLDER.findall(t)))


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    sequence_number: int


class VersionAdded(_Event, frozen=True, kw_only=True, tag="prompt.version.added"):
    """A template's version `version` (its position in the stream, plus one), added by the
    owner `owner`; the first one creates the template."""

    owner: str
    version: int
    template: PromptTemplate


PromptEvent = VersionAdded


class Rendered(msgspec.Struct, frozen=True, kw_only=True):
    """What a version with a request's variables becomes."""

    instructions: str | None
    input: list[InputMessage]


def render(template: PromptTemplate, variables: Mapping[str, Variable]) -> Rendered:
    """The template with `variables` in its placeholders; every placeholder must have one
    (OpenAI's 400 names those missing). Variables that no placeholder names are unused."""
    missing = [n for n in template.placeholders() if n not in variables]
    if missing:
        raise InvalidRequest(
            f"Missing prompt variables: {', '.join(missing)}.",
            param="prompt.variables",
            code="missing_required_parameter",
        )
    instructions = template.instructions
    if instructions is not None:
        instructions = "".join(_text_only(instructions, variables, "instructions"))
    messages = [
        msgspec.structs.replace(m, content=_parts(m.content, variables)) for m in template.input
    ]
    return Rendered(instructions=instructions, input=messages)


def _texts(parts: list[InputPart]) -> Iterator[str]:
    for part in parts:
        if isinstance(part, InputText | OutputText):
            yield part.text


def _pieces(text: str, variables: Mapping[str, Variable]) -> Iterator[tuple[str, Variable]]:
    """`text` cut at its placeholders: (name, value) for each, ("", text) between them."""
    at = 0
    for found in PLACEHOLDER.finditer(text):
        yield "", text[at : found.start()]
        yield found.group(1), variables[found.group(1)]
        at = found.end()
    yield "", text[at:]


def _text_only(text: str, variables: Mapping[str, Variable], where: str) -> Iterator[str]:
    for name, value in _pieces(text, variables):
        if isinstance(value, InputImage | InputFile):
            raise InvalidRequest(
                f"Invalid 'prompt.variables.{name}': an {value.__struct_config__.tag} cannot "
                f"stand in the prompt's {where}, only in the text of one of its user messages.",
                param=f"prompt.variables.{name}",
                code="invalid_value",
            )
        yield value if isinstance(value, str) else value.text


def _parts(parts: list[InputPart], variables: Mapping[str, Variable]) -> list[InputPart]:
    out: list[InputPart] = []
    for part in parts:
        if isinstance(part, OutputText):
            text = "".join(_text_only(part.text, variables, "assistant messages"))
            out.append(msgspec.structs.replace(part, text=text))
        elif isinstance(part, InputText):
            out += _split(part.text, variables)
        else:
            out.append(part)
    return out


def _split(text: str, variables: Mapping[str, Variable]) -> list[InputPart]:
    """An `input_text` with its placeholders filled: text runs joined, each image or file
    a part of its own where its placeholder was (no empty text part around it)."""
    out: list[InputPart] = []
    run: list[str] = []
    for _, value in _pieces(text, variables):
        if isinstance(value, InputImage | InputFile):
            if "".join(run):
                out.append(InputText(text="".join(run)))
            run = []
            out.append(value)
        else:
            run.append(value if isinstance(value, str) else value.text)
    if "".join(run) or not out:
        out.append(InputText(text="".join(run)))
    return out
