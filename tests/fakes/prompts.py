"""Builders of `Prompt`s and conversation items for engine tests and benchmarks."""

from __future__ import annotations

from typing import Any

from domain.generation import Prompt, Turn
from domain.objects import (
    FunctionCall,
    FunctionCallOutput,
    InputFunctionCall,
    InputItem,
    InputMessage,
    InputReasoning,
    InputText,
    OutputItem,
    OutputMessage,
    OutputText,
    ReasoningConfig,
    ReasoningItem,
    ReasoningText,
    TextConfig,
    ToolChoice,
)
from domain.tools import OfferedTool

WEATHER = OfferedTool(
    name="get_weather",
    description="Gets the current weather in a city.",
    parameters={
        "type": "object",
        "properties": {"location": {"type": "string", "description": "The city"}},
        "required": ["location"],
    },
)


def user(text: str, id: str = "msg_u") -> InputMessage:
    return InputMessage(id=id, role="user", content=[InputText(text=text)])


def tool_output(call_id: str, output: str, id: str = "fco_1") -> FunctionCallOutput:
    return FunctionCallOutput(id=id, call_id=call_id, output=output)


def input_call(call_id: str, name: str, arguments: str, id: str = "fc_in") -> InputFunctionCall:
    return InputFunctionCall(id=id, call_id=call_id, name=name, arguments=arguments)


def input_reasoning(text: str, id: str = "rs_in") -> InputReasoning:
    return InputReasoning(id=id, content=[ReasoningText(text=text)])


def answer(text: str, id: str = "msg_a", phase: Any = "final_answer") -> OutputMessage:
    return OutputMessage(id=id, status="completed", content=[OutputText(text=text)], phase=phase)


def reasoning(text: str, id: str = "rs_1") -> ReasoningItem:
    return ReasoningItem(id=id, content=[ReasoningText(text=text)], status="completed")


def call(call_id: str, name: str, arguments: str, id: str = "fc_1") -> FunctionCall:
    return FunctionCall(id=id, call_id=call_id, name=name, arguments=arguments, status="completed")


def turn(input: list[InputItem], output: list[OutputItem], instructions: str | None = None) -> Turn:
    return Turn(response_id="resp_prev", instructions=instructions, input=input, output=output)


def make_prompt(
    input: list[InputItem] | None = None,
    *,
    history: list[Turn] | None = None,
    instructions: str | None = None,
    tools: list[OfferedTool] | None = None,
    tool_choice: ToolChoice = "auto",
    max_output_tokens: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    effort: Any = None,
    text: TextConfig | None = None,
    model: str = "gpt-oss-120b",
) -> Prompt:
    return Prompt(
        response_id="resp_test",
        model=model,
        instructions=instructions,
        history=history or [],
        input=input if input is not None else [user("Hello")],
        tools=tools or [],
        tool_choice=tool_choice,
        parallel_tool_calls=True,
        max_output_tokens=max_output_tokens,
        temperature=temperature,
        top_p=top_p,
        reasoning=ReasoningConfig(effort=effort),
        text=text or TextConfig(),
    )
