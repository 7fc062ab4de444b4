"""The event vocabulary and its codec: stable tags, lossless round-trips, OpenAI wire shapes,
facts kept out of the wire bytes, and corrupt rows refused with their stream and position."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from openai.types.responses import ResponseIncompleteEvent

from adapters.store import rows
from adapters.store.rows import response_json
from domain.errors import CorruptEvent, InvalidTransition
from domain.events import (
    TAGS,
    TERMINAL_TAGS,
    AnyEvent,
    Encoded,
    EndFacts,
    LegacyResponseCancelled,
    LifecycleEvent,
    OutputItemDone,
    OutputTextDelta,
    ReasoningTextDelta,
    ReasoningTextDone,
    RequestFacts,
    ResponseCancelled,
    ResponseCreated,
    ResponseFailed,
    ResponseIncomplete,
    SchemaReasoningDelta,
    SchemaReasoningDone,
    decode,
    encode,
    encode_json,
    tag_of,
)
from domain.fold.replay import replay
from domain.generation import ReasoningDelta
from domain.objects import (
    FormatJsonSchema,
    FunctionCall,
    FunctionCallOutput,
    FunctionToolChoice,
    InputFunctionCall,
    InputMessage,
    InputReasoning,
    InputText,
    OutputMessage,
    OutputText,
    ReasoningConfig,
    ReasoningItem,
    ReasoningText,
    Refusal,
    SummaryText,
    TextConfig,
)
from tests.unit.domain_helpers import (
    RESPONSE_ID,
    Stream,
    all_scenario_events,
    make_response,
    roundtrip,
    sdk_response,
    sdk_stream_event,
)

# Written out on purpose: renaming or dropping a tag makes stored logs unreadable.
GOLDEN_TAGS = [
    "response.cancelled",
    "response.code_interpreter_call.completed",
    "response.code_interpreter_call.in_progress",
    "response.code_interpreter_call.interpreting",
    "response.code_interpreter_call_code.delta",
    "response.code_interpreter_call_code.done",
    "response.completed",
    "response.content_part.added",
    "response.content_part.done",
    "response.created",
    "response.custom_tool_call_input.delta",
    "response.custom_tool_call_input.done",
    "response.failed",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.in_progress",
    "response.incomplete",
    "response.mcp_call.completed",
    "response.mcp_call.failed",
    "response.mcp_call.in_progress",
    "response.mcp_call_arguments.delta",
    "response.mcp_call_arguments.done",
    "response.mcp_list_tools.completed",
    "response.mcp_list_tools.failed",
    "response.mcp_list_tools.in_progress",
    "response.output_item.added",
    "response.output_item.done",
    "response.output_text.delta",
    "response.output_text.done",
    "response.queued",
    "response.reasoning.delta",
    "response.reasoning.done",
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
    "response.reasoning_text.delta",
    "response.reasoning_text.done",
    "response.refusal.delta",
    "response.refusal.done",
    "response.web_search_call.completed",
    "response.web_search_call.in_progress",
    "response.web_search_call.searching",
]

SCENARIO_EVENTS = all_scenario_events()


def _direct_events() -> list[AnyEvent]:
    """Events built by hand with every optional field set, beyond what the commands emit."""
    response = make_response(
        previous_response_id="resp_prev",
        temperature=0.3,
        top_p=0.9,
        user="u-1",
        safety_identifier="s-1",
        prompt_cache_key="pk",
        parallel_tool_calls=False,
        tool_choice=FunctionToolChoice(name="get_weather"),
        reasoning=ReasoningConfig(effort="high", summary="auto"),
        text=TextConfig(
            format=FormatJsonSchema(name="w", schema={"type": "object"}, strict=True),
            verbosity="low",
        ),
    )
    facts = RequestFacts(
        owner="owner-direct",
        input=[
            InputMessage(
                id="m0",
                role="developer",
                content=[InputText(text="hi"), OutputText(text="yo"), Refusal(refusal="no")],
            ),
            InputFunctionCall(id="f0", call_id="c0", name="get_weather", arguments="{}"),
            FunctionCallOutput(id="o0", call_id="c0", output="sunny"),
            InputReasoning(
                id="r0",
                summary=[SummaryText(text="s")],
                content=[ReasoningText(text="t")],
                encrypted_content="enc",
            ),
        ],
        stream=True,
        include=["reasoning.encrypted_content"],
        extra={"stream_options": {"include_obfuscation": False}},
    )
    return [
        ResponseCreated(sequence_number=0, response=response, facts=facts),
        OutputTextDelta(
            sequence_number=5,
            item_id="msg_x_0",
            output_index=0,
            content_index=0,
            delta='é😀"\n',
            logprobs=[{"token": "é", "logprob": -0.1, "bytes": [195, 169], "top_logprobs": []}],
        ),
        OutputItemDone(
            sequence_number=6,
            output_index=1,
            item=ReasoningItem(
                id="rs_x_1",
                summary=[SummaryText(text="s")],
                content=[ReasoningText(text="t")],
                encrypted_content="opaque",
                status="completed",
            ),
        ),
        OutputItemDone(
            sequence_number=7,
            output_index=2,
            item=FunctionCall(call_id="c1", name="get_weather", arguments="{}", status="completed"),
        ),
        ResponseFailed(
            sequence_number=9,
            response=msgspec.structs.replace(response, status="failed"),
            facts=EndFacts(reason="worker_lost", detail="host-7 lease expired"),
        ),
    ]


DIRECT_EVENTS = _direct_events()
ALL_EVENTS = [e for _, e in SCENARIO_EVENTS] + DIRECT_EVENTS


def _ids(events: Sequence[AnyEvent]) -> list[str]:
    return [f"{e.sequence_number}-{tag_of(type(e))}" for e in events]


# --- tags -----------------------------------------------------------------------------------


def test_the_tag_list_is_exactly_the_golden_list() -> None:
    assert sorted(TAGS) == GOLDEN_TAGS


def test_terminal_tags_are_the_four_endings() -> None:
    assert sorted(TERMINAL_TAGS) == [
        "response.cancelled",
        "response.completed",
        "response.failed",
        "response.incomplete",
    ]


# Tags kept only to read logs written before; nothing writes them any more.
READ_ONLY_TAGS = ["response.cancelled"]


@pytest.mark.parametrize("tag", [t for t in GOLDEN_TAGS if t not in READ_ONLY_TAGS])
def test_every_tag_is_produced_by_the_aggregate_and_round_trips(tag: str) -> None:
    produced = [e for _, e in SCENARIO_EVENTS if tag_of(type(e)) == tag]
    assert produced, f"no scenario emits {tag}"
    for event in produced:
        assert roundtrip(event) == event
        assert encode(event).type == tag


# --- round-trip -----------------------------------------------------------------------------


@pytest.mark.parametrize("event", ALL_EVENTS, ids=_ids(ALL_EVENTS))
def test_decode_of_encode_is_the_same_event_with_its_facts(event: AnyEvent) -> None:
    assert roundtrip(event) == event


def test_decode_accepts_text_as_well_as_bytes() -> None:
    event = DIRECT_EVENTS[0]
    enc = encode(event)
    assert enc.facts is not None
    back = decode(enc.data.decode(), enc.facts.decode(), stream_id="resp_x", position=0)
    assert back == event


def test_unknown_fields_in_stored_rows_are_tolerated() -> None:
    """Stored events stay readable forever: a field added later must not break old readers."""
    event = DIRECT_EVENTS[1]
    data = json.loads(encode(event).data)
    data["added_in_a_later_version"] = {"x": 1}
    assert decode(json.dumps(data), None, stream_id="resp_x", position=5) == event


def test_a_field_with_a_default_may_be_missing_from_old_rows() -> None:
    data = {
        "type": "response.output_text.delta",
        "sequence_number": 3,
        "item_id": "msg_x_0",
        "output_index": 0,
        "content_index": 0,
        "delta": "hi",
    }
    event = decode(json.dumps(data), None, stream_id="resp_x", position=3)
    assert isinstance(event, OutputTextDelta)
    assert event.logprobs == []


# --- facts stay out of the wire -------------------------------------------------------------

FACT_CARRIERS = [e for e in ALL_EVENTS if getattr(e, "facts", None) is not None]


def test_every_facts_carrier_is_covered() -> None:
    carried = {tag_of(type(e)) for e in FACT_CARRIERS}
    assert carried == {
        "response.created",
        "response.failed",
        "response.incomplete",
        "response.output_item.added",
        "response.output_item.done",
    }
    assert any(isinstance(e, ResponseCancelled) for e in FACT_CARRIERS)


@pytest.mark.parametrize("event", FACT_CARRIERS, ids=_ids(FACT_CARRIERS))
def test_facts_travel_beside_the_wire_bytes_not_in_them(event: Any) -> None:
    enc = encode(event)
    assert enc.facts is not None
    assert "facts" not in json.loads(enc.data)
    bare = decode(enc.data, None, stream_id=RESPONSE_ID, position=event.sequence_number)
    assert bare == msgspec.structs.replace(event, facts=None)
    assert msgspec.json.decode(enc.facts, type=type(event.facts)) == event.facts


def _secret_events() -> list[AnyEvent]:
    base = make_response()
    facts = RequestFacts(
        owner="OWNER-SECRET-1",
        input=[InputMessage(id="m0", role="user", content=[InputText(text="INPUT-SECRET-2")])],
        extra={"k": "EXTRA-SECRET-3"},
    )
    end = EndFacts(reason="REASON-SECRET-4", detail="DETAIL-SECRET-5")
    ended = msgspec.structs.replace(base, completed_at=None)
    return [
        ResponseCreated(sequence_number=0, response=base, facts=facts),
        ResponseFailed(sequence_number=3, response=ended, facts=end),
        ResponseIncomplete(sequence_number=3, response=ended, facts=end),
        ResponseCancelled(sequence_number=3, response=ended, facts=end),
    ]


@pytest.mark.parametrize("event", _secret_events(), ids=lambda e: tag_of(type(e)))
def test_wire_bytes_never_contain_owner_input_reason_or_detail(event: AnyEvent) -> None:
    enc = encode(event)
    assert enc.facts is not None
    secrets = [s for s in (b"OWNER", b"INPUT", b"EXTRA", b"REASON", b"DETAIL") if s in enc.facts]
    assert secrets, "the facts document holds the secrets"
    for secret in secrets:
        assert secret not in enc.data


NO_FACTS = [e for e in ALL_EVENTS if getattr(e, "facts", None) is None]


@pytest.mark.parametrize("event", NO_FACTS, ids=_ids(NO_FACTS))
def test_events_without_facts_store_no_facts_document(event: AnyEvent) -> None:
    assert encode(event).facts is None


def test_a_facts_carrier_without_facts_round_trips_as_none() -> None:
    created = DIRECT_EVENTS[0]
    assert isinstance(created, ResponseCreated)
    bare = msgspec.structs.replace(created, facts=None)
    enc = encode(bare)
    assert enc.facts is None
    assert roundtrip(bare) == bare


# --- OpenAI wire shapes ---------------------------------------------------------------------

CANCELLED = [e for e in ALL_EVENTS if isinstance(e, ResponseCancelled)]
# The Open Responses schema's names for reasoning events, which no OpenAI SDK knows.
SCHEMA_NAMED = [e for e in ALL_EVENTS if isinstance(e, SchemaReasoningDelta | SchemaReasoningDone)]
OPENAI_EVENTS = [e for e in ALL_EVENTS if e not in SCHEMA_NAMED]


@pytest.mark.parametrize("event", OPENAI_EVENTS, ids=_ids(OPENAI_EVENTS))
def test_wire_event_validates_against_the_openai_sdk_union(event: AnyEvent) -> None:
    model = sdk_stream_event(encode(event).data)
    assert getattr(model, "type") == tag_of(type(event))  # noqa: B009
    assert getattr(model, "sequence_number") == event.sequence_number  # noqa: B009


@pytest.mark.parametrize("event", CANCELLED, ids=_ids(CANCELLED))
def test_a_cancellation_goes_out_as_response_incomplete_and_reads_back_as_one(
    event: AnyEvent,
) -> None:
    """No SDK knows a cancelled event: the wire has OpenAI's `response.incomplete` with
    status `cancelled`, and the log still reads it back as a cancellation."""
    enc = encode(event)
    data: dict[str, Any] = json.loads(enc.data)
    assert (enc.type, data["type"]) == ("response.incomplete", "response.incomplete")
    assert set(data) == {"type", "sequence_number", "response"}
    assert data["response"]["status"] == "cancelled"
    assert data["response"]["incomplete_details"] is None
    model = sdk_stream_event(enc.data)
    assert isinstance(model, ResponseIncompleteEvent) and model.response.status == "cancelled"
    back = decode(enc.data, enc.facts, stream_id=RESPONSE_ID, position=event.sequence_number)
    assert type(back) is ResponseCancelled and back == event


def test_a_cancellation_written_before_still_reads_and_re_encodes_as_it_was() -> None:
    """Logs written before hold resplog's own `response.cancelled`: it is read as a
    cancellation (a `LegacyResponseCancelled`) and encodes back to the bytes stored."""
    event = CANCELLED[0]
    data = json.loads(encode(event).data)
    data["type"] = "response.cancelled"
    stored = json.dumps(data, separators=(",", ":")).encode()
    facts = encode(event).facts
    old = decode(stored, facts, stream_id=RESPONSE_ID, position=event.sequence_number)
    assert isinstance(old, LegacyResponseCancelled) and isinstance(old, ResponseCancelled)
    assert encode(old) == Encoded("response.cancelled", stored, facts)
    assert old.response == event.response


def test_an_incomplete_response_is_not_read_as_a_cancellation() -> None:
    (incomplete,) = [e for e in ALL_EVENTS if type(e) is ResponseIncomplete][:1]
    assert type(roundtrip(incomplete)) is ResponseIncomplete


def test_wire_snapshots_of_lifecycle_events_validate_as_openai_responses() -> None:
    lifecycle = [e for e in ALL_EVENTS if isinstance(e, LifecycleEvent)]
    assert lifecycle
    for event in lifecycle:
        sdk_response(event.response)


@pytest.mark.parametrize(
    "event", [e for e in ALL_EVENTS if isinstance(e, LifecycleEvent)], ids=lambda e: tag_of(type(e))
)
def test_the_snapshot_cut_from_the_wire_bytes_is_the_response_encoded(
    event: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row's snapshot is cut from the event's wire bytes (adapters/store/rows.py), not
    encoded again: it must be exactly the response's own encoding, facts or not."""
    wire = encode(event).data
    want = encode_json(event.response)
    monkeypatch.setattr(rows, "encode_json", None)  # the cut, not the fallback
    assert response_json(event, wire) == want


def test_a_wire_layout_that_differs_falls_back_to_encoding_the_response() -> None:
    event = next(e for e in ALL_EVENTS if isinstance(e, ResponseCreated))
    odd = encode(event).data.replace(b'"sequence_number"', b'"sequence_number" ', 1)
    assert response_json(event, odd) == encode_json(event.response)


# --- corrupt rows ---------------------------------------------------------------------------

STREAM = "resp_corrupt_42"
POS = 7


def _delta_data(**changes: Any) -> bytes:
    data: dict[str, Any] = {
        "type": "response.output_text.delta",
        "sequence_number": POS,
        "item_id": "msg_x_0",
        "output_index": 0,
        "content_index": 0,
        "delta": "hi",
        "logprobs": [],
    }
    data.update(changes)
    return json.dumps({k: v for k, v in data.items() if v is not ...}).encode()


def _created_data(position: int = POS) -> bytes:
    created = DIRECT_EVENTS[0]
    return encode(msgspec.structs.replace(created, sequence_number=position)).data


CORRUPT_ROWS: dict[str, tuple[bytes | str, bytes | str | None]] = {
    "bad_json": (b'{"type": "response.output_text.delta", ', None),
    "not_utf8": (b"\xff\xfe{}", None),
    "not_an_object": (b"[1, 2]", None),
    "no_tag": (b'{"sequence_number": 7}', None),
    "unknown_tag": (_delta_data(type="response.output_text.exploded"), None),
    "wrong_type_of_delta": (_delta_data(delta=5), None),
    "wrong_type_of_position": (_delta_data(sequence_number="7"), None),
    "missing_field": (_delta_data(item_id=...), None),
    "bad_nested_part": (
        _delta_data(
            type="response.content_part.added",
            delta=...,
            logprobs=...,
            part={"type": "no_such_part"},
        ),
        None,
    ),
    "sequence_number_is_not_the_position": (_delta_data(sequence_number=POS + 1), None),
    "facts_on_an_event_that_carries_none": (_delta_data(), b'{"reason": "x"}'),
    "facts_are_bad_json": (_created_data(), b'{"owner": '),
    "facts_have_wrong_types": (_created_data(), b'{"owner": 1, "input": []}'),
    "facts_of_the_wrong_kind": (_created_data(), b'{"reason": "user"}'),
    "facts_are_null": (_created_data(), b"null"),
}


@pytest.mark.parametrize(("data", "facts"), CORRUPT_ROWS.values(), ids=CORRUPT_ROWS.keys())
def test_a_corrupt_row_raises_corrupt_event_naming_stream_and_position(
    data: bytes | str, facts: bytes | str | None
) -> None:
    with pytest.raises(CorruptEvent) as info:
        decode(data, facts, stream_id=STREAM, position=POS)
    assert info.value.stream_id == STREAM
    assert info.value.position == POS
    assert STREAM in str(info.value)
    assert f"position {POS}" in str(info.value)


def test_the_valid_rows_behind_the_corrupt_cases_decode() -> None:
    """The corrupt cases above fail for the reason they name, not for a broken base row."""
    assert isinstance(decode(_delta_data(), None, stream_id=STREAM, position=POS), OutputTextDelta)
    created = decode(
        _created_data(), encode(DIRECT_EVENTS[0]).facts, stream_id=STREAM, position=POS
    )
    assert isinstance(created, ResponseCreated)


ONE_CARRIER_PER_TAG = list({tag_of(type(e)): e for e in FACT_CARRIERS}.values())


@pytest.mark.parametrize("event", ONE_CARRIER_PER_TAG, ids=lambda e: tag_of(type(e)))
def test_facts_smuggled_into_the_wire_bytes_are_corrupt(event: AnyEvent) -> None:
    """The wire bytes are sent to clients verbatim, so a row whose data holds facts is refused."""
    enc = encode(event)
    assert enc.facts is not None
    data = json.loads(enc.data)
    data["facts"] = json.loads(enc.facts)
    with pytest.raises(CorruptEvent, match="facts"):
        decode(json.dumps(data), None, stream_id=STREAM, position=event.sequence_number)


# --- values, not nulls, where the Open Responses schema wants them --------------------------

# Fields the Open Responses schema types without `null`: absent when unset, never null.
_ABSENT_NOT_NULL = {"phase", "encrypted_content", "verbosity"}
_SAMPLING = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "top_logprobs")


def _nulls(value: Any, path: str = "") -> list[str]:
    """Paths of the keys in `_ABSENT_NOT_NULL` that hold null, anywhere in `value`."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in _ABSENT_NOT_NULL and inner is None:
                found.append(f"{path}.{key}")
            found += _nulls(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found += _nulls(inner, f"{path}[{i}]")
    return found


@pytest.mark.parametrize("event", ALL_EVENTS, ids=_ids(ALL_EVENTS))
def test_no_wire_event_holds_null_where_the_schema_wants_absence(event: AnyEvent) -> None:
    assert _nulls(json.loads(encode(event).data)) == []


def test_a_message_without_a_phase_and_a_config_without_verbosity_leave_them_out() -> None:
    message = OutputMessage(id="msg_x_0", status="completed", content=[OutputText(text="hi")])
    done = json.loads(encode(OutputItemDone(sequence_number=4, output_index=0, item=message)).data)
    assert "phase" not in done["item"]
    created = json.loads(encode(ResponseCreated(sequence_number=0, response=make_response())).data)
    assert created["response"]["text"] == {"format": {"type": "text"}}
    with_phase = msgspec.structs.replace(message, phase="commentary")
    assert (
        json.loads(encode(OutputItemDone(sequence_number=4, output_index=0, item=with_phase)).data)[
            "item"
        ]["phase"]
        == "commentary"
    )


@pytest.mark.parametrize(
    "event", [e for e in ALL_EVENTS if isinstance(e, LifecycleEvent)], ids=lambda e: tag_of(type(e))
)
def test_every_snapshot_echoes_numbers_for_the_sampling_settings(event: AnyEvent) -> None:
    response = json.loads(encode(event).data)["response"]
    for name in _SAMPLING:
        assert isinstance(response[name], int | float), name


def test_a_log_written_with_nulls_before_stays_readable_and_reads_them_as_absent() -> None:
    """Rows written before these fields were left out hold `null` (and null sampling
    settings): they still decode, and a null reads as the field being absent."""
    old = make_response()
    data = json.loads(encode(ResponseCreated(sequence_number=0, response=old)).data)
    resp = data["response"]
    resp.update(temperature=None, top_p=None, top_logprobs=None)
    resp["text"]["verbosity"] = None
    for name in ("presence_penalty", "frequency_penalty"):
        del resp[name]
    item = {"type": "message", "id": "m", "status": "completed", "role": "assistant"}
    resp["output"] = [
        {**item, "content": [], "phase": None},
        {"type": "reasoning", "id": "r", "summary": [], "encrypted_content": None},
    ]
    event = decode(json.dumps(data).encode(), None, stream_id=RESPONSE_ID, position=0)
    assert isinstance(event, ResponseCreated)
    assert (event.response.temperature, event.response.top_p) == (None, None)
    assert _nulls(json.loads(encode(event).data)) == []
    assert event.response.output[0] == OutputMessage(id="m", status="completed")


# --- reasoning event names -------------------------------------------------------------------


def test_the_naming_recorded_at_creation_names_every_reasoning_event() -> None:
    """`open_responses` in the created event's facts: the schema's names, and the same
    fields as OpenAI's; the default (and a log written before) is OpenAI's."""
    named = [tag_of(type(e)) for e in SCHEMA_NAMED]
    assert named == ["response.reasoning.delta"] * 2 + ["response.reasoning.done"]
    for event in SCHEMA_NAMED:
        data = json.loads(encode(event).data)
        assert data["type"] == tag_of(type(event))
        assert set(data) == set(msgspec.to_builtins(event)) and "item_id" in data
    openai_named = [
        e for e in OPENAI_EVENTS if isinstance(e, ReasoningTextDelta | ReasoningTextDone)
    ]
    assert {tag_of(type(e)) for e in openai_named} == {
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
    }
    old = msgspec.json.decode(b'{"owner": "o", "input": []}', type=RequestFacts)
    assert old.reasoning_events == "openai"


@pytest.mark.parametrize("naming", ["openai", "open_responses"])
def test_the_fold_refuses_a_reasoning_event_named_the_other_way(naming: Any) -> None:
    """A log is read as its creation named it: an event by the other names is refused."""
    s = Stream.new(reasoning_events=naming)
    new = s.emit(ReasoningDelta(text="x"))
    delta = new[-1]
    assert isinstance(delta, ReasoningTextDelta)
    other = ReasoningTextDelta if type(delta) is SchemaReasoningDelta else SchemaReasoningDelta
    renamed = other(**{f: getattr(delta, f) for f in delta.__struct_fields__})
    assert replay(s.events) == s.state
    with pytest.raises(InvalidTransition, match="names reasoning events"):
        replay([*s.events[:-1], renamed])
