"""The audit views: event summaries and lifecycle moments, the conversation renderings, and
the export file's reader (service/audit/)."""

from __future__ import annotations

import msgspec
import pytest

from domain.errors import ArchiveError
from domain.events import EndFacts, RequestFacts, ResponseCreated
from domain.objects import (
    FunctionCall,
    FunctionCallOutput,
    InputMessage,
    InputText,
    McpApprovalRequest,
    McpCall,
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningText,
    ResponseObject,
    SetAsideItem,
    Usage,
    WebSearchCall,
)
from domain.reasons import CancelReason
from service.audit import archive
from service.audit.conversation import (
    added_turn,
    conversation,
    to_markdown,
    to_text,
    turn_view,
)
from service.audit.records import flags_of
from service.audit.timeline import Replay, clip, durations, iso, summary
from tests.integration import streams
from tests.unit.audit_helpers import log, record, replace, stored


def test_every_event_has_a_one_line_summary() -> None:
    """Each tag gets a non-empty summary without line breaks."""
    events = streams.events_of(streams.every_tag_script())
    lines = [summary(e) for e in events]
    assert all(line and "\n" not in line for line in lines)
    assert lines[0].startswith("in_progress · model test-model · owner owner_a")
    assert any("get_weather" in line for line in lines)


def test_clip_quotes_and_cuts_long_text() -> None:
    """Deltas are shown quoted (newlines visible) and cut to the width."""
    assert clip("a\nb") == '"a\\nb"'
    assert len(clip("x" * 500, 20)) == 20


def test_replay_notes_each_moment_and_the_durations_between_them() -> None:
    """created -> queued -> started -> first output -> ended, from `recorded_at`."""
    rid, events = log(deltas=3, background=True, end="cancelled")
    folded = Replay()
    for row in stored(rid, events, start=100.0):
        folded.feed(row)
    m = folded.moments
    assert (m.created, m.queued, m.started) == (100.0, 100.01, 100.02)
    assert m.first_output is not None and m.ended == 100.0 + (len(events) - 1) / 100
    d = durations(m)
    assert d.queue_wait == pytest.approx(0.02)
    assert d.total == pytest.approx((len(events) - 1) / 100)
    assert folded.end == EndFacts(reason="user")
    assert folded.request is not None and folded.request.owner == "owner_a"
    assert folded.response.status == "cancelled"


def test_iso_is_utc_with_milliseconds() -> None:
    """Times print the same wherever the command runs."""
    assert iso(0.25) == "1970-01-01T00:00:00.250Z"
    assert iso(None) == "-"


def _turn(rid: str, text: str, output: list[object], usage: int, **kw: object) -> object:
    response = ResponseObject(
        id=rid,
        created_at=1_700_000_000,
        status="completed",
        model="m",
        output=output,  # type: ignore[arg-type]
        usage=Usage(input_tokens=usage, output_tokens=2 * usage, total_tokens=3 * usage),
        **kw,  # type: ignore[arg-type]
    )
    items = [InputMessage(id="i", role="user", content=[InputText(text=text)])]
    return turn_view(RequestFacts(owner="alice", input=items), response, None)


def test_a_conversation_renders_every_turn_and_sums_the_usage() -> None:
    """Instructions, inputs, reasoning, calls and their outputs, usage per turn and total."""
    call = FunctionCall(id="fc_1", call_id="call_1", name="get_weather", arguments='{"c":"P"}')
    first = _turn(
        "resp_1",
        "Weather?",
        [ReasoningItem(id="rs", content=[ReasoningText(text="think")]), call],
        1,
        instructions="Be brief.",
    )
    response = ResponseObject(
        id="resp_2",
        created_at=1_700_000_001,
        status="completed",
        model="m",
        output=[OutputMessage(id="m", status="completed", content=[OutputText(text="Sunny")])],
        usage=Usage(input_tokens=10, output_tokens=20, total_tokens=30),
    )
    answer = FunctionCallOutput(id="o", call_id="call_1", output="sunny ```x```")
    second = turn_view(RequestFacts(owner="alice", input=[answer]), response, None)
    view = conversation("resp_2", [first, second], None)  # type: ignore[list-item]
    assert view.usage.total_tokens == 33 and view.usage.input_tokens == 11
    text = to_text(view)
    for part in (
        "instructions: Be brief.",
        "user: Weather?",
        "reasoning: think",
        'function_call get_weather (call_1): {"c":"P"}',
        "function_call_output (call_1): sunny",
        "assistant: Sunny",
        "Total usage: 11 in",
    ):
        assert part in text
    md = to_markdown(view)
    assert md.startswith("# Conversation `resp_2`")
    assert md.count("## Turn") == 2
    assert "````\nsunny ```x```\n````" in md  # a fence longer than any inside
    assert (
        msgspec.json.decode(msgspec.json.encode(view))["turns"][1]["input"][0]["call_id"]
        == "call_1"
    )


def test_a_conversation_whose_earlier_turns_are_gone_says_so() -> None:
    """A collected earlier turn is named, not an error."""
    view = conversation("resp_2", [], "resp_1")
    assert "resp_1 is not in the log" in to_text(view)
    assert "`resp_1` is not in the log" in to_markdown(view)


# --- the export file ---------------------------------------------------------------------


# Every column that no event records, set (a cancelled-then-deleted response).
FLAGGED = {"deleted_at": 5.0, "cancel_requested_at": 4.0, "cancel_reason": CancelReason.DELETED}


def export_lines(*logs: tuple[str, list[object]], end: bool = True) -> list[bytes]:
    lines = [archive.header(1.0, {})]
    events = 0
    for rid, evs in logs:
        rows = stored(rid, evs)  # type: ignore[arg-type]
        lines.append(archive.response_line(record(rid, evs, **FLAGGED), len(rows)))  # type: ignore[arg-type]
        lines += [archive.event_line(r) for r in rows]
        events += len(rows)
    if end:
        lines.append(archive.end(len(logs), events))
    return lines


def test_an_export_reads_back_into_the_same_rows() -> None:
    """Event rows byte for byte; the read-model row rebuilt equal, flags included."""
    a, b = log(deltas=2), log(deltas=1, end="failed", background=True)
    imported = list(archive.read(export_lines(a, b)))  # type: ignore[arg-type]
    assert [i.record for i in imported] == [record(rid, evs, **FLAGGED) for rid, evs in (a, b)]
    assert [i.events for i in imported] == [stored(*a), stored(*b)]
    assert flags_of(imported[0].record) == {**flags_of(imported[0].record), **FLAGGED}


def test_a_format_1_export_still_reads_back() -> None:
    """Files written before conversations were exported: header format 1, no conversation
    count on the last line."""
    a = log(deltas=1)
    lines = export_lines(a)  # type: ignore[arg-type]
    old_head = lines[0].replace(b'"format":2', b'"format":1')
    old_end = lines[-1].replace(b',"conversations":0', b"")
    assert old_head != lines[0] and old_end != lines[-1]
    imported = list(archive.read([old_head, *lines[1:-1], old_end]))
    assert [i.events for i in imported] == [stored(*a)]  # type: ignore[union-attr]
    future = lines[0].replace(b'"format":2', b'"format":3')
    assert "export format 3" in _error([future, *lines[1:]])


def _error(lines: list[bytes]) -> str:
    with pytest.raises(ArchiveError) as info:
        list(archive.read(lines))
    return str(info.value)


def test_a_malformed_export_is_refused_naming_the_line() -> None:
    """Header, order, counts, truncation and unverifiable logs are all refused."""
    good = export_lines(log(deltas=1), log(deltas=1))  # type: ignore[arg-type]
    assert "first line is not its header" in _error(good[1:])
    assert "cut short" in _error(good[:-1])
    assert _error([*good[:3], b"{oops\n", *good[3:]]).startswith("line 4: not an export line")
    assert "appears twice" in _error([good[0], *good[1:-1], *good[1:-1], good[-1]])
    dropped = [*good[:3], *good[4:]]
    assert "of its" in _error(dropped)
    assert "its last line says" in _error([*good[:-1], archive.end(9, 9)])


def test_an_export_whose_log_does_not_verify_or_has_not_ended_is_refused() -> None:
    """Import is for intact, ended logs only."""
    rid, events = log(deltas=3)
    lines = export_lines((rid, events))  # type: ignore[arg-type]
    at = next(i for i, line in enumerate(lines) if b"tok0" in line)
    broken = msgspec.json.decode(lines[at])
    broken["data"] = broken["data"].replace("tok0", "tokX")
    lines[at] = msgspec.json.encode(broken) + b"\n"
    assert "does not verify" in _error(lines)
    running = export_lines(log(deltas=2, end="open"))  # type: ignore[arg-type]
    assert "has not ended" in _error(running)


def test_the_request_survives_the_round_trip() -> None:
    """Hidden facts travel in the file too."""
    rid, events = log(deltas=1)
    imported = next(archive.read(export_lines((rid, events))))  # type: ignore[arg-type]
    first = imported.events[0].event()
    assert isinstance(first, ResponseCreated) and first.facts is not None
    assert first.facts.owner == "owner_a"
    assert replace(first, facts=None) != first


def test_mcp_builtin_and_set_aside_items_are_rendered_by_their_own_kind() -> None:
    """Every entry kind has its own label in the text and Markdown views (they once fell
    through to `reasoning:` and "custom tool output")."""
    response = ResponseObject(
        id="resp_3",
        created_at=1_700_000_002,
        status="completed",
        model="m",
        output=[
            McpCall(id="mcp_1", server_label="docs", name="search", arguments="{}", output="hit"),
            WebSearchCall(id="ws_1", action={"type": "search", "query": "tea"}, status="completed"),
        ],
    )
    aside = SetAsideItem(id="sh_1", item={"type": "shell_call_output", "output": "ok"})
    passed = McpCall(id="mcp_0", server_label="docs", name="find", arguments="{}", output="t")
    asked = McpApprovalRequest(id="mcpr_0", server_label="docs", name="rm", arguments="{}")
    added = added_turn([(aside, False), (passed, False), (asked, False)], "alice", 1_700_000_000)
    made = turn_view(RequestFacts(owner="alice", input=[]), response, None)
    view = conversation("resp_3", [added, made], None)
    text = to_text(view)
    assert "set_aside shell_call_output: (not shown to the model)" in text
    assert "mcp_call docs.search (mcp_1): {} -> hit" in text
    assert "mcp_call docs.find (mcp_0): {} -> t" in text  # an input item of its own
    assert "mcp_approval_request docs.rm (mcpr_0): {}" in text
    assert "web_search_call (ws_1): " in text
    assert "reasoning:" not in text
    md = to_markdown(view)
    assert "**mcp call docs.search (mcp 1):**" not in md  # ids keep their underscores
    assert "**mcp call docs.search (mcp_1):**" in md
    assert "custom tool output" not in md
