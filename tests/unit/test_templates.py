"""Prompt templates: rendering a version with a request's variables (domain/templates.py),
reading `prompt` off a create body, and reading a template file (service/wire/)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from domain.errors import InvalidRequest
from domain.objects import InputFile, InputImage, InputMessage, InputText, OutputText, PromptRef
from domain.templates import PromptTemplate, Variable, render
from service.wire.decode import parse_create_body
from service.wire.limits import Limits
from service.wire.templates import read_template

PNG = "data:image/png;base64,iVBORw0KGgo="
IMAGE = InputImage(image_url=PNG)
FILE = InputFile(file_data="data:text/plain;base64,aGk=", filename="a.txt")


def user(*parts: Any) -> InputMessage:
    return InputMessage(id="", role="user", content=list(parts))


def test_text_variables_fill_every_placeholder_in_instructions_and_messages() -> None:
    template = PromptTemplate(
        instructions="You are {{persona}}; {{ persona }} always.",
        input=[
            user(InputText(text="Tell me about {{topic}}.")),
            InputMessage(id="", role="assistant", content=[OutputText(text="On {{topic}}:")]),
        ],
    )
    assert template.placeholders() == ["persona", "topic"]
    variables: dict[str, Variable] = {"persona": "terse", "topic": InputText(text="cats"), "x": "y"}
    done = render(template, variables)
    assert done.instructions == "You are terse; terse always."
    assert done.input[0].content == [InputText(text="Tell me about cats.")]
    assert done.input[1].content == [OutputText(text="On cats:")]


def test_an_image_or_a_file_takes_its_placeholders_place_as_a_part_of_its_own() -> None:
    template = PromptTemplate(input=[user(InputText(text="{{photo}} then {{doc}}")), user(IMAGE)])
    done = render(template, {"photo": IMAGE, "doc": FILE})
    assert done.input[0].content == [IMAGE, InputText(text=" then "), FILE]
    assert done.input[1].content == [IMAGE]  # parts without text are left as they are
    alone = render(PromptTemplate(input=[user(InputText(text="{{photo}}"))]), {"photo": IMAGE})
    assert alone.input[0].content == [IMAGE]  # no empty text part around it


def test_a_missing_variable_names_every_one_missing() -> None:
    template = PromptTemplate(instructions="{{a}} {{b}}", input=[user(InputText(text="{{c}}"))])
    with pytest.raises(InvalidRequest) as caught:
        render(template, {"b": "x"})
    assert caught.value.message == "Missing prompt variables: a, c."
    assert (caught.value.param, caught.value.code) == (
        "prompt.variables",
        "missing_required_parameter",
    )


@pytest.mark.parametrize(
    "template",
    [
        PromptTemplate(instructions="Look: {{photo}}"),
        PromptTemplate(
            input=[InputMessage(id="", role="assistant", content=[OutputText(text="{{photo}}")])]
        ),
    ],
)
def test_an_image_where_only_text_can_go_is_refused(template: PromptTemplate) -> None:
    with pytest.raises(InvalidRequest) as caught:
        render(template, {"photo": IMAGE})
    assert caught.value.param == "prompt.variables.photo"
    assert "an input_image cannot stand in" in caught.value.message


def test_a_create_reads_prompt_into_the_reference_it_echoes() -> None:
    body = {
        "model": "m",
        "prompt": {
            "id": "pmpt_abc",
            "variables": {"name": "Ada", "pic": {"type": "input_image", "image_url": PNG}},
        },
    }
    req = parse_create_body(msgspec.json.encode(body), Limits())
    assert req.response.prompt == PromptRef(
        id="pmpt_abc", variables={"name": "Ada", "pic": IMAGE}, version=None
    )
    assert req.input == []  # `input` may be left out when a prompt is named
    plain = parse_create_body(b'{"model": "m", "input": "x"}', Limits())
    assert b'"prompt"' not in msgspec.json.encode(plain.response)  # absent, not null


@pytest.mark.parametrize(
    ("prompt", "param"),
    [
        ({"id": "pmpt_" + "x" * 300}, "prompt.id"),
        ({"id": "pmpt_a", "variables": {f"v{n}": "x" for n in range(65)}}, "prompt.variables"),
        (
            {"id": "pmpt_a", "variables": {"v": {"type": "input_image"}}},
            "prompt.variables.v.image_url",
        ),
        ({"id": "pmpt_a", "variables": {"v": 3}}, "prompt.variables"),
        ({"id": "pmpt_a", "extra": 1}, "prompt.extra"),
    ],
)
def test_a_bad_prompt_is_a_400_naming_it(prompt: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_create_body(msgspec.json.encode({"model": "m", "prompt": prompt}), Limits())
    assert (caught.value.param or "").startswith(param)


def test_a_template_file_is_instructions_messages_or_both() -> None:
    both = read_template(
        {"instructions": "Hi {{x}}", "input": [{"role": "user", "content": "{{x}}"}]}, Limits()
    )
    assert both == PromptTemplate(instructions="Hi {{x}}", input=[user(InputText(text="{{x}}"))])
    assert read_template({"input": "text"}, Limits()).input == [user(InputText(text="text"))]


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({}, "needs 'instructions' or 'input'"),
        ([], "must be a JSON object"),
        ({"instructions": "x", "model": "m"}, "model"),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": "o"}]}, "input[0]"),
        ({"input": [{"role": "user", "content": "x", "id": "msg_1"}]}, "have no ids"),
    ],
)
def test_a_bad_template_file_is_refused(raw: Any, says: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        read_template(raw, Limits())
    assert says in caught.value.message
