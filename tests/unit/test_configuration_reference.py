"""docs/configuration.md against the `resplog` command tree, both ways: every command, every
long flag and every environment variable the CLI has is in the reference, under its command's
own heading; and the reference names no command, flag or `RESPLOG_*` variable the CLI lacks.

It fails when a flag is added without its docs (or docs describe a flag that is gone): add a
row to the command's table in docs/configuration.md, with its env, default and meaning.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from adapters.cli import main

REFERENCE_PATH = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
REFERENCE = REFERENCE_PATH.read_text()

Path_ = tuple[str, ...]


def walk(command: click.Command, path: Path_ = ()) -> Iterator[tuple[Path_, click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from walk(sub, (*path, name))


COMMANDS = dict(walk(main))


def options(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option)]


def long_flags(command: click.Command) -> set[str]:
    return {
        opt
        for option in options(command)
        for opt in (*option.opts, *option.secondary_opts)
        if opt.startswith("--")
    } | {"--help"}


def envvars(command: click.Command) -> set[str]:
    found: set[str] = set()
    for option in options(command):
        if isinstance(option.envvar, str):
            found.add(option.envvar)
        elif option.envvar:
            found.update(option.envvar)
    return found


def name(path: Path_) -> str:
    return " ".join(("resplog", *path))


def sections(text: str) -> dict[str, str]:
    """Each heading's text up to the next heading, keyed by what the heading's backticks
    hold (`### \\`resplog serve\\`` -> "resplog serve")."""
    found: dict[str, str] = {}
    parts = re.split(r"^(#{1,6} .*)$", text, flags=re.MULTILINE)
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        match = re.fullmatch(r"#{1,6} `([^`]+)`", heading.strip())
        if match:
            found[match.group(1)] = body
    return found


SECTIONS = sections(REFERENCE)
WITH_OPTIONS = [path for path, command in COMMANDS.items() if options(command)]
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
ENV = re.compile(r"\bRESPLOG_[A-Z0-9_]+\b")


def table_flags(section: str) -> set[str]:
    """The flags in the first cell of each row of the section's tables."""
    found: set[str] = set()
    for line in section.splitlines():
        if line.startswith("|"):
            first = line.split("|")[1]
            found.update(FLAG.findall(first))
    return found


def test_the_walk_finds_the_group_and_nested_commands() -> None:
    """The root group (`--log-level`) and subcommands of subgroups count."""
    assert () in COMMANDS and ("keys", "revoke") in COMMANDS and ("serve",) in WITH_OPTIONS


@pytest.mark.parametrize("path", list(COMMANDS), ids=name)
def test_every_command_is_named(path: Path_) -> None:
    """The reference names every command and command group."""
    assert f"`{name(path)}" in REFERENCE, f"{name(path)} is missing from {REFERENCE_PATH}"


@pytest.mark.parametrize("path", WITH_OPTIONS, ids=name)
def test_every_flag_and_envvar_is_under_its_command(path: Path_) -> None:
    """A command with flags has a heading of its own (`### \\`resplog X\\``) under which every
    long flag (`--no-…` forms included) and every environment variable of it is named."""
    command = COMMANDS[path]
    section = SECTIONS.get(name(path))
    assert section is not None, f"{REFERENCE_PATH.name} has no heading `{name(path)}`"
    named = set(FLAG.findall(section))
    missing = sorted(long_flags(command) - {"--help"} - named)
    assert missing == [], f"{name(path)}: flags missing from its section: {missing}"
    missing_env = sorted(e for e in envvars(command) if f"`{e}`" not in section)
    assert missing_env == [], f"{name(path)}: environment variables missing: {missing_env}"


@pytest.mark.parametrize("path", WITH_OPTIONS, ids=name)
def test_a_commands_table_names_only_its_own_flags(path: Path_) -> None:
    """The rows of a command's table describe flags that command has."""
    extra = sorted(table_flags(SECTIONS.get(name(path), "")) - long_flags(COMMANDS[path]))
    assert extra == [], f"{name(path)}: its table names flags it lacks: {extra}"


def test_the_reference_names_no_flag_the_cli_lacks() -> None:
    """Every `--flag` anywhere on the page is a flag of some command."""
    known = set().union(*(long_flags(command) for command in COMMANDS.values()))
    unknown = sorted(set(FLAG.findall(REFERENCE)) - known)
    assert unknown == [], f"{REFERENCE_PATH.name} names flags no command has: {unknown}"


def test_the_reference_names_no_envvar_the_cli_lacks() -> None:
    """Every `RESPLOG_*` variable on the page is some flag's, and every flag's is there."""
    known = set().union(*(envvars(command) for command in COMMANDS.values()))
    named = set(ENV.findall(REFERENCE))
    assert sorted(named - known) == [], f"unknown variables: {sorted(named - known)}"
    assert sorted(known - named) == [], f"undocumented variables: {sorted(known - named)}"


def test_every_command_heading_is_a_command() -> None:
    """A `resplog …` heading names a command that exists (a renamed command leaves none)."""
    names = {name(path) for path in COMMANDS}
    stale = sorted(h for h in SECTIONS if h.startswith("resplog") and h not in names)
    assert stale == [], f"headings for commands the CLI lacks: {stale}"
