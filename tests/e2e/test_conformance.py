"""The wire contract: every response object and stream event a running server emits (the
scripted engine; plain, streamed and background responses; completed, cancelled, failed and
incomplete endings; live, replayed and resumed) is checked against

- the Open Responses JSON schema (a copy in `tests/fixtures/openresponses/`), and
- the official SDK's pydantic models, strictly: the event's own model (an unknown type is
  refused, not guessed at) and no field the SDK does not declare.

A deviation that is known and explained is listed in `SCHEMA_EXCEPTIONS` or
`SDK_EXCEPTIONS`; any other fails the test, and so does an exception that no longer
happens (so the lists stay true). Every test runs on PostgreSQL and on SQLite.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest
from jsonschema import Draft202012Validator
from openai.types.responses import Response, ResponseStreamEvent

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_responses_api import sse_events

SCHEMA: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "openresponses" / "schema.json").read_text()
)
# The schema of each stream event, by its `type`.
EVENT_SCHEMAS: dict[str, str] = {}
for _ref in SCHEMA["stream_event"]["oneOf"]:
    _name = _ref["$ref"].rsplit("/", 1)[1]
    EVENT_SCHEMAS[SCHEMA["components"]["schemas"][_name]["properties"]["type"]["enum"][0]] = _name

# Deviations from the Open Responses schema that are known, as (schema, path): why.
SCHEMA_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("ResponseResource", "text.format.schema"): (
        "the schema types a json_schema format's `schema` as null only (`anyOf: [null]`), "
        "which no echo of a real format can meet; resplog echoes the schema the client sent, "
        "as OpenAI does (openai-python `ResponseFormatTextJSONSchemaConfig.schema`)"
    ),
}
# Event types the Open Responses schema does not have: why.
EVENT_TYPE_EXCEPTIONS: dict[str, str] = {
    "response.reasoning_text.delta": "OpenAI's name (openai-python "
    "`ResponseReasoningTextDeltaEvent`); the schema's is `response.reasoning.delta`",
    "response.reasoning_text.done": "OpenAI's name (openai-python "
    "`ResponseReasoningTextDoneEvent`); the schema's is `response.reasoning.done`",
}
# The schema's reasoning event names (`--reasoning-events open-responses`): no OpenAI SDK
# has a model for them.
SCHEMA_ONLY_TYPES = {"response.reasoning.delta", "response.reasoning.done"}
# Fields the official SDK's models do not declare, as (model, field): why.
SDK_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("Response", "presence_penalty"): "the Open Responses schema requires it; OpenAI has none",
    ("Response", "frequency_penalty"): "the Open Responses schema requires it; OpenAI has none",
    ("Response", "store"): "the Open Responses schema requires it; the SDK (3.63) leaves it out",
    ("ResponseFunctionCallArgumentsDoneEvent", "name"): (
        "resplog has always sent the function's name here for clients that read it; neither "
        "the SDK (3.63) nor the schema declares it, and both allow extra fields"
    ),
    ("Logprob", "bytes"): (
        "the Open Responses schema's `LogProb` requires `bytes` in the text events too; the "
        "SDK's event models (`ResponseTextDeltaEvent.Logprob`) leave it out, allowing extras"
    ),
    ("LogprobTopLogprob", "bytes"): "as for `Logprob`: the schema's `TopLogProb` requires it",
    # OpenAI's stream obfuscation pad (adapters/http/sse.py), on by default: the Open
    # Responses schema declares `obfuscation` on the text, reasoning, reasoning summary and
    # function-call argument deltas; the SDK (3.63) only on
    # `ResponseShellCallCommandDeltaEvent`, and its other event models allow extra fields.
    **{
        (event, "obfuscation"): "OpenAI's obfuscation pad on delta events"
        for event in (
            "ResponseTextDeltaEvent",
            "ResponseReasoningTextDeltaEvent",
            "ResponseReasoningSummaryTextDeltaEvent",
            "ResponseFunctionCallArgumentsDeltaEvent",
            "ResponseRefusalDeltaEvent",
            "ResponseCustomToolCallInputDeltaEvent",
            "ResponseMcpCallArgumentsDeltaEvent",
            "ResponseCodeInterpreterCallCodeDeltaEvent",
        )
    },
}

_stream_event: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)
SLOW = {"scripted_delay_ms": "20", "scripted_tokens": "400"}
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": False,
    }
]


@cache
def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator({**SCHEMA, "$ref": f"#/components/schemas/{name}"})


def _path(error: Any) -> str:
    return ".".join(str(p) for p in error.absolute_path)


def _leaves(error: Any) -> Iterator[Any]:
    if not error.context:
        yield error
    for inner in error.context or []:
        yield from _leaves(inner)


def schema_deviations(name: str, instance: Any) -> set[tuple[str, str]]:
    """(schema, path) of each place `instance` breaks schema `name`: the innermost errors,
    less those of `oneOf` branches for another `type` (a discriminator's other choices)."""
    found: set[tuple[str, str]] = set()
    for error in _validator(name).iter_errors(instance):
        leaves = list(_leaves(error))
        other = [e for e in leaves if e.validator == "enum" and list(e.path)[-1:] == ["type"]]
        for leaf in [e for e in leaves if e not in other] or leaves:
            path = _path(leaf)
            if path.startswith("response."):  # an event's snapshot is a ResponseResource
                found.add(("ResponseResource", path.removeprefix("response.")))
            else:
                found.add((name, path))
    return found


def _undeclared(model: Any, owner: str = "") -> Iterator[tuple[str, str]]:
    """(model, field) of every field the SDK's models keep as an undeclared extra."""
    if isinstance(model, pydantic.BaseModel):
        for key in model.model_extra or {}:
            yield type(model).__name__, key
        for field in type(model).model_fields:
            yield from _undeclared(getattr(model, field), owner)
    elif isinstance(model, list):
        for inner in model:
            yield from _undeclared(inner, owner)


class Emitted:
    """Everything one scenario received: response objects and stream events."""

    def __init__(self) -> None:
        self.objects: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []

    def stream(self, response: httpx.Response) -> list[dict[str, Any]]:
        assert response.status_code == 200, response.text
        got = [payload for _, payload in sse_events(response.read())]
        self.events += got
        return got

    def object(self, response: httpx.Response) -> dict[str, Any]:
        assert response.status_code == 200, response.text
        got: dict[str, Any] = response.json()
        self.objects.append(got)
        return got

    def check(self) -> tuple[set[tuple[str, str]], set[tuple[str, str]], set[str]]:
        """(schema deviations, SDK extras, event types the spec lacks) of all received.
        The schema's reasoning event names are not OpenAI's: the SDK's union has no model
        for them, so they are checked against the schema only."""
        schema: set[tuple[str, str]] = set()
        sdk: set[tuple[str, str]] = set()
        unknown: set[str] = set()
        for obj in self.objects:
            schema |= schema_deviations("ResponseResource", obj)
            sdk |= set(_undeclared(Response.model_validate(obj)))
        for event in self.events:
            name = EVENT_SCHEMAS.get(event["type"])
            if name is None:
                unknown.add(event["type"])
            else:
                schema |= schema_deviations(name, event)
            if event["type"] in SCHEMA_ONLY_TYPES:
                continue
            model = _stream_event.validate_python(event)  # a discriminated union: strict
            assert model.type == event["type"]
            sdk |= set(_undeclared(model))
        return schema, sdk, unknown


def _create(http: httpx.Client, **body: Any) -> httpx.Response:
    return http.post("/v1/responses", json={"model": "scripted", **body})


def _stream(http: httpx.Client, seen: Emitted, **body: Any) -> list[dict[str, Any]]:
    with http.stream("POST", "/v1/responses", json={"model": "scripted", **body}) as r:
        return seen.stream(r)


def _replay(http: httpx.Client, seen: Emitted, rid: str, after: int = -1) -> None:
    query = {"stream": "true", "starting_after": str(after)}
    with http.stream("GET", f"/v1/responses/{rid}", params=query) as r:
        seen.stream(r)
    seen.object(http.get(f"/v1/responses/{rid}"))


def _wait(http: httpx.Client, seen: Emitted, rid: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        obj = seen.object(http.get(f"/v1/responses/{rid}"))
        if obj["status"] not in ("queued", "in_progress"):
            return obj
        time.sleep(0.05)
    raise AssertionError(f"{rid} did not end")


# --- scenarios: each drives the server one way and returns what it received ------------------


def plain(http: httpx.Client, seen: Emitted) -> set[str]:
    obj = seen.object(_create(http, input="hello", instructions="Be brief."))
    seen.object(http.get(f"/v1/responses/{obj['id']}"))
    turn = [
        {"role": "assistant", "content": "Let me look.", "phase": "commentary"},
        {"role": "user", "content": "go on"},
    ]
    seen.object(_create(http, input=turn, previous_response_id=obj["id"]))
    return {"completed"}


def formats(http: httpx.Client, seen: Emitted) -> set[str]:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    text = {"format": {"type": "json_schema", "name": "s", "schema": schema}, "verbosity": "low"}
    seen.object(_create(http, input="x", text=text, temperature=0.2, top_p=0.5, top_logprobs=2))
    seen.object(_create(http, input="x", text={"format": {"type": "json_object"}}))
    logprobs = ["message.output_text.logprobs"]
    _stream(http, seen, input="odds", include=logprobs, top_logprobs=1, stream=True)
    _stream(http, seen, input="sum up", reasoning={"summary": "auto"}, stream=True)
    trigger = [{"role": "user", "content": "compact"}, {"type": "compaction_trigger"}]
    _stream(http, seen, input=trigger, store=False, stream=True)
    return {"completed"}


def streamed(http: httpx.Client, seen: Emitted) -> set[str]:
    events = _stream(http, seen, input="stream me", stream=True)
    rid = events[0]["response"]["id"]
    _replay(http, seen, rid)
    _replay(http, seen, rid, after=4)
    with http.stream("GET", f"/v1/responses/{rid}/events") as r:
        seen.stream(r)
    return {"completed"}


def tool_call(http: httpx.Client, seen: Emitted) -> set[str]:
    events = _stream(http, seen, input="Paris?", tools=TOOLS, stream=True)
    final = events[-1]["response"]
    call = next(i for i in final["output"] if i["type"] == "function_call")
    output = [{"type": "function_call_output", "call_id": call["call_id"], "output": "20C"}]
    _stream(http, seen, input=output, tools=TOOLS, previous_response_id=final["id"], stream=True)
    return {"completed"}


def background(http: httpx.Client, seen: Emitted) -> set[str]:
    queued = seen.object(_create(http, input="later", background=True))
    _wait(http, seen, queued["id"])
    _replay(http, seen, queued["id"])
    events = _stream(http, seen, input="later, streamed", background=True, stream=True)
    _replay(http, seen, events[0]["response"]["id"], after=2)
    return {"completed"}


def cancelled(http: httpx.Client, seen: Emitted) -> set[str]:
    queued = seen.object(_create(http, input="cancel me", background=True, metadata=SLOW))
    rid = queued["id"]
    with http.stream("GET", f"/v1/responses/{rid}", params={"stream": "true"}) as live:
        lines = live.iter_lines()
        for line in lines:
            if line == "event: response.output_text.delta":
                break
        seen.object(http.post(f"/v1/responses/{rid}/cancel"))
        rest = "\n".join(lines)
    assert "response.incomplete" in rest
    _replay(http, seen, rid)
    return {"cancelled"}


def failed(http: httpx.Client, seen: Emitted) -> set[str]:
    events = _stream(http, seen, input="fail", stream=True, metadata={"scripted_mode": "fail"})
    _replay(http, seen, events[0]["response"]["id"])
    seen.object(_create(http, input="fail", metadata={"scripted_mode": "fail"}))
    return {"failed"}


def incomplete(http: httpx.Client, seen: Emitted) -> set[str]:
    long = {"scripted_tokens": "200"}
    _stream(http, seen, input="go on", max_output_tokens=16, metadata=long, stream=True)
    seen.object(_create(http, input="go on", max_output_tokens=16, metadata=long))
    return {"incomplete"}


SCENARIOS = [plain, formats, streamed, tool_call, background, cancelled, failed, incomplete]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_every_object_and_event_matches_the_open_responses_schema_and_the_sdk(
    server: Server, scenario: Any
) -> None:
    seen = Emitted()
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        endings = scenario(http, seen)
    assert seen.objects or seen.events
    statuses = {o["status"] for o in seen.objects}
    statuses |= {e["response"]["status"] for e in seen.events if "response" in e}
    assert endings <= statuses
    schema, sdk, unknown = seen.check()
    assert unknown - EVENT_TYPE_EXCEPTIONS.keys() == set(), "types the schema does not have"
    assert schema - SCHEMA_EXCEPTIONS.keys() == set()
    assert sdk - SDK_EXCEPTIONS.keys() == set()
    # Each listed exception must still be met somewhere, or the list is out of date.
    if scenario is formats:
        assert set(SCHEMA_EXCEPTIONS) <= schema
    assert {("Response", "presence_penalty"), ("Response", "frequency_penalty")} <= sdk


def test_the_copied_schema_checks_what_it_should() -> None:
    """The copy is wired up: a null where a number is required, an unknown event type and
    a missing required field are each caught."""
    base = {"type": "response.output_text.delta", "sequence_number": 1, "item_id": "m"}
    delta = {**base, "output_index": 0, "content_index": 0, "delta": "x"}
    assert schema_deviations(EVENT_SCHEMAS["response.output_text.delta"], delta) == set()
    missing = {k: v for k, v in delta.items() if k != "delta"}
    assert schema_deviations(EVENT_SCHEMAS["response.output_text.delta"], missing)
    assert "response.cancelled" not in EVENT_SCHEMAS
    assert "response.reasoning_text.delta" not in EVENT_SCHEMAS


# --- the Open Responses schema's reasoning event names ---------------------------------------


@pytest.fixture(scope="module")
def schema_named(
    fresh_pg: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Server, Server]]:
    """Two replicas of one PostgreSQL database: one that names reasoning events as the
    schema does and runs no background work, one with the default naming that does."""
    url, tmp = fresh_pg(), tmp_path_factory.mktemp("schema-named")
    flags = ("--reasoning-events", "open-responses", "--workers", "0")
    creator = start_server(url, "postgres", tmp / "creator.log", *flags)
    worker = start_server(url, "postgres", tmp / "worker.log")
    yield creator, worker
    stop_server(creator)
    stop_server(worker)


def _types(events: list[dict[str, Any]]) -> set[str]:
    return {e["type"] for e in events}


def test_with_the_schema_names_every_event_is_one_the_schema_has(
    schema_named: tuple[Server, Server],
) -> None:
    creator = schema_named[0]
    seen = Emitted()
    with httpx.Client(base_url=creator.base_url, timeout=60) as http:
        events = _stream(http, seen, input="think first", stream=True)
    assert {"response.reasoning.delta", "response.reasoning.done"} <= _types(events)
    assert not {t for t in _types(events) if t.startswith("response.reasoning_text")}
    schema, sdk, unknown = seen.check()
    assert (unknown, schema) == (set(), set())
    assert sdk - SDK_EXCEPTIONS.keys() == set()


def test_the_naming_is_the_responses_own_whichever_process_generates_or_reads_it(
    schema_named: tuple[Server, Server],
) -> None:
    """Created where the schema's names are chosen (a replica with no workers, so the
    other one must generate it), generated by a worker whose own flag is OpenAI's: the
    log, its replay on either replica and a resume all use the names chosen at creation."""
    creator, worker = schema_named
    seen = Emitted()
    with httpx.Client(base_url=creator.base_url, timeout=60) as a:
        rid = seen.object(_create(a, input="later", background=True))["id"]
        with httpx.Client(base_url=worker.base_url, timeout=60) as b:
            assert _wait(b, seen, rid)["status"] == "completed"
            _replay(b, seen, rid)
            _replay(a, seen, rid, after=3)
    names = _types(seen.events)
    assert "response.reasoning.delta" in names and "response.reasoning_text.delta" not in names
