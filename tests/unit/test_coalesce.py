"""Merging the deltas one network read brought."""

from __future__ import annotations

from domain.generation import (
    ArgumentsDelta,
    EndItem,
    FunctionCallStart,
    ReasoningDelta,
    TextDelta,
    coalesce,
)


def test_runs_of_the_same_kind_merge_and_boundaries_stay() -> None:
    deltas = [
        ReasoningDelta(text="a"),
        ReasoningDelta(text="b"),
        EndItem(),
        TextDelta(text="c", phase="commentary"),
        TextDelta(text="d", phase="commentary"),
        TextDelta(text="e", phase="final_answer"),
        FunctionCallStart(name="f"),
        ArgumentsDelta(text="{"),
        ArgumentsDelta(text="}"),
    ]
    assert coalesce(deltas) == [
        ReasoningDelta(text="ab"),
        EndItem(),
        TextDelta(text="cd", phase="commentary"),
        TextDelta(text="e", phase="final_answer"),
        FunctionCallStart(name="f"),
        ArgumentsDelta(text="{}"),
    ]


def test_two_calls_in_a_row_are_not_merged() -> None:
    deltas = [FunctionCallStart(name="f"), FunctionCallStart(name="g")]
    assert coalesce(deltas) == deltas
    assert coalesce([]) == []
