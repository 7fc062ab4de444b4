"""Every `resplog` command and every one of its flags is documented in docs/operations.md."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from adapters.cli import main

OPERATIONS = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()


def commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        yield path, command
        if isinstance(command, click.Group):
            yield from commands(command, f"{path} ")


ALL = dict(commands(main))


@pytest.mark.parametrize("path", sorted(ALL))
def test_the_command_and_its_flags_are_documented(path: str) -> None:
    assert f"resplog {path}" in OPERATIONS, f"`resplog {path}` is not in docs/operations.md"
    flags = [
        flag
        for param in ALL[path].params
        if isinstance(param, click.Option)
        for flag in param.opts
        if flag.startswith("--") and flag != "--help"
    ]
    assert [f for f in flags if f"`{f}`" not in OPERATIONS] == []
