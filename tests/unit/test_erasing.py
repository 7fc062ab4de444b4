"""Erasure's redaction (service/audit/erasing.py) against the real fold: an erased stream
folds as strictly as any other, whatever its deltas, and what is content is erased while
what is structure (an error's code, a schema's pattern) stays."""

from __future__ import annotations

import msgspec
import pytest

from domain.builder.emit import emit
from domain.builder.finish import finish
from domain.commands import create
from domain.events import AnyEvent, RequestFacts, decode, encode
from domain.fold.replay import replay
from domain.generation import (
    AnyDelta,
    ArgumentsDelta,
    EndItem,
    Finished,
    FunctionCallStart,
    InputDelta,
    ReasoningDelta,
    RefusalDelta,
    SummaryDelta,
    TextDelta,
    TokenUsage,
)
from domain.objects import InputMessage, InputText, ResponseObject
from service.audit.erasing import ERASED, StreamRedactor, redact

SPLIT: list[AnyDelta] = [
    ReasoningDelta(text="secret-"),
    ReasoningDelta(text=""),
    ReasoningDelta(text="reasoning"),
    SummaryDelta(text="secret-"),
    SummaryDelta(text="summary"),
    EndItem(),
    TextDelta(text=""),
    TextDelta(text="secret-"),
    TextDelta(text="output"),
    RefusalDelta(text="secret-"),
    RefusalDelta(text="refusal"),
    EndItem(),
    FunctionCallStart(name="lookup", call_id="call_1"),
    ArgumentsDelta(text='{"q":'),
    ArgumentsDelta(text='"secret"}'),
    EndItem(),
    FunctionCallStart(name="patch", custom=True),
    InputDelta(text="secret-"),
    InputDelta(text="input"),
    EndItem(),
    FunctionCallStart(name="fetch", server_label="docs"),
    ArgumentsDelta(text='{"u":'),
    ArgumentsDelta(text='"secret"}'),
    EndItem(),
    FunctionCallStart(name="python", builtin="python"),
    ArgumentsDelta(text="print('secret-"),
    ArgumentsDelta(text="code')"),
    EndItem(),
]


def _events() -> list[AnyEvent]:
    response = ResponseObject(id="resp_1", created_at=1, status="in_progress", model="m")
    question = InputMessage(id="msg_1", role="user", content=[InputText(text="secret-input")])
    decision = create(response, RequestFacts(owner="alice", input=[question]))
    events, state = list(decision.events), decision.state
    for delta in SPLIT:
        decision = emit(state, delta)
        events += decision.events
        state = decision.state
    events += finish(state, Finished(reason="stop", usage=TokenUsage()), now=1).events
    return events


def _erased(events: list[AnyEvent], redactor: StreamRedactor) -> list[AnyEvent]:
    out = []
    for event in events:
        encoded = encode(event)
        facts = None if encoded.facts is None else redact(encoded.facts)
        data = redactor.data(encoded.data)
        assert b"secret" not in data and b"secret" not in (facts or b"")
        out.append(decode(data, facts, stream_id="s", position=event.sequence_number))
    return out


def test_an_erased_stream_of_split_deltas_folds() -> None:
    events = _events()
    state = replay(_erased(events, StreamRedactor()))  # raises at the first illegal event
    texts = [
        getattr(part, "text", getattr(part, "refusal", None))
        for item in state.response.output
        for part in getattr(item, "content", None) or []
    ]
    assert texts and set(texts) == {ERASED}
    assert state.version == events[-1].sequence_number


def test_erasing_each_delta_alone_would_not_fold() -> None:
    """What the stream's redactor is for: each delta erased on its own adds up to more
    than its erased final text (a fresh redactor per event forgets the text's first)."""
    events = _events()
    erased = [_erased([event], StreamRedactor())[0] for event in events]
    with pytest.raises(Exception, match="differs from its deltas"):
        replay(erased)


def test_content_under_a_typed_key_is_erased_and_structure_is_kept() -> None:
    doc = {
        "call": {"type": "code_interpreter_call", "code": "print(1)"},
        "done": {"type": "response.code_interpreter_call_code.done", "code": "print(1)"},
        "action": {"type": "find_in_page", "pattern": "needle", "url": "https://x"},
        "error": {"code": "server_error", "message": "boom"},
        "schema": {"type": "string", "pattern": "^[a-z]+$"},
    }
    out = msgspec.json.decode(redact(msgspec.json.encode(doc)))
    assert out["call"]["code"] == out["done"]["code"] == ERASED
    assert out["action"] == {"type": "find_in_page", "pattern": ERASED, "url": ERASED}
    assert out["error"] == {"code": "server_error", "message": ERASED}
    assert out["schema"] == doc["schema"]
