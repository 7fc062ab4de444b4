"""Domain functions stay short: a long one hides several rules in one place, and the rules
of the aggregate must each be readable on their own."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_BODY_LINES = 40


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement (docstring included) to the last; not the signature."""
    assert node.end_lineno is not None
    return node.end_lineno - node.body[0].lineno + 1


def test_no_domain_function_is_longer_than_forty_lines() -> None:
    too_long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({body_lines(node)} lines)"
        for path in sorted((ROOT / "domain").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and body_lines(node) > MAX_BODY_LINES
    ]
    assert not too_long, "split these:\n" + "\n".join(too_long)
