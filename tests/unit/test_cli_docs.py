"""Every command of the `resplog` group, however deep and whoever added it, answers
`--help` and is documented in docs/configuration.md with each of its flags."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from adapters.cli import main

OPERATIONS = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()


def commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))


def command_at(path: tuple[str, ...]) -> click.Command:
    command: click.Command = main
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


ALL = list(commands(main))


def test_the_walk_finds_nested_commands() -> None:
    """Subcommands of subgroups count too (e.g. `responses list`)."""
    assert ("responses", "list") in ALL and ("verify",) in ALL


@pytest.mark.parametrize("path", ALL, ids=" ".join)
def test_every_command_has_help(path: tuple[str, ...]) -> None:
    """`--help` works and says what the command does."""
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    assert command_at(path).help, f"resplog {' '.join(path)} has no help text"


@pytest.mark.parametrize("path", ALL, ids=" ".join)
def test_every_command_and_flag_is_documented(path: tuple[str, ...]) -> None:
    """docs/configuration.md names the command and each of its long options."""
    assert f"resplog {' '.join(path)}" in OPERATIONS
    flags = [
        opt
        for param in command_at(path).params
        if isinstance(param, click.Option)
        for opt in (*param.opts, *param.secondary_opts)
        if opt.startswith("--") and opt != "--help"
    ]
    missing = [
        flag for flag in flags if f"`{flag}" not in OPERATIONS and f"{flag}`" not in OPERATIONS
    ]
    assert missing == [], f"resplog {' '.join(path)}: undocumented {missing}"
