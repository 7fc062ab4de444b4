"""Every `resplog` command, and each of its flags, is documented in docs/operations.md."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from adapters.cli import main

DOC = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()


@pytest.mark.parametrize("name", sorted(main.commands))
def test_every_command_and_its_flags_are_documented(name: str) -> None:
    assert f"### `resplog {name}`" in DOC
    command = main.commands[name]
    flags = [o for p in command.params if isinstance(p, click.Option) for o in p.opts]
    assert [f for f in flags if f"`{f}`" not in DOC] == []
