"""Structured outputs end to end with the official SDK: `responses.parse(text_format=...)`
with the scripted engine, which answers a `json_schema` format with a document built from
the schema (adapters/engines/scripted.py `structured_answer`)."""

from __future__ import annotations

import json
from enum import StrEnum

import openai
import pydantic


class Unit(StrEnum):
    celsius = "celsius"
    fahrenheit = "fahrenheit"


class Reading(pydantic.BaseModel):
    city: str
    degrees: float
    unit: Unit


class Forecast(pydantic.BaseModel):
    readings: list[Reading]
    summary: str | None
    days: int
    sunny: bool


def test_parse_with_a_pydantic_model_validates_end_to_end(client: openai.OpenAI) -> None:
    parsed = client.responses.parse(
        model="scripted", input="weather in Paris", text_format=Forecast
    )
    forecast = parsed.output_parsed
    assert isinstance(forecast, Forecast)
    assert forecast.readings[0].unit is Unit.celsius
    assert forecast.days == 5  # the scripted integer: the words of "You said: weather in Paris"
    assert parsed.text.format.type == "json_schema"
    stored = client.responses.retrieve(parsed.id)
    assert Forecast.model_validate_json(stored.output_text) == forecast


def test_json_object_format_answers_one_object(client: openai.OpenAI) -> None:
    r = client.responses.create(
        model="scripted",
        input="say hi in JSON",
        text={"format": {"type": "json_object"}},
        metadata={"scripted_tokens": "3"},  # never cuts a JSON answer
    )
    assert json.loads(r.output_text) == {"answer": "You said: say hi in JSON"}
