"""Prompt templates end to end: made with `resplog prompts add`, used by the official
openai SDK's `responses.create(prompt=…)` on a real server, over PostgreSQL and SQLite."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner

from adapters.cli import main
from tests.e2e.conftest import Server

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 60).decode()
NOTES = "data:text/plain;base64," + base64.b64encode(b"hello, notes").decode()
TRANSCRIPT = {"scripted_mode": "transcript"}


def cli(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    """`resplog prompts …` on the server's database, run in this process (the CLI's own
    code, without a Python start-up per call)."""
    done = CliRunner().invoke(main, ["prompts", *args, "--database-url", server.database_url])
    return subprocess.CompletedProcess(args, done.exit_code, done.stdout, done.stderr)


def add(server: Server, *args: str) -> tuple[str, int]:
    """`prompts add`: its one line, `<id> version <n>`."""
    done = cli(server, "add", *args)
    assert done.returncode == 0, done.stderr
    pid, word, version = done.stdout.split()
    assert word == "version"
    return pid, int(version)


def template_file(tmp_path: Path, template: dict[str, Any]) -> str:
    path = tmp_path / "prompt.json"
    path.write_text(json.dumps(template))
    return str(path)


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_a_create_uses_the_latest_version_or_the_one_it_names(
    client: openai.OpenAI, server: Server, tmp_path: Path
) -> None:
    """Text variables fill the template's instructions and messages; the response echoes
    `prompt` with the version used, which its first event records for the audit."""
    pid, first = add(server, "--instructions", "You are {{persona}}.")
    second_template = {
        "instructions": "Be {{ persona }}, always.",
        "input": [{"role": "user", "content": "Topic: {{topic}}"}],
    }
    same, second = add(server, "--id", pid, "--file", template_file(tmp_path, second_template))
    assert (same, first, second) == (pid, 1, 2)
    variables = {"persona": "terse", "topic": {"type": "input_text", "text": "cats"}}
    r = client.responses.create(
        model="scripted",
        prompt={"id": pid, "variables": variables},
        input="go",
        metadata=TRANSCRIPT,
    )
    assert r.status == "completed" and r.instructions == "Be terse, always."
    assert r.output_text == "user: Topic: cats | user: go"
    assert r.prompt is not None and (r.prompt.id, r.prompt.version) == (pid, "2")
    assert r.prompt.model_dump(exclude_none=True)["variables"] == variables
    assert client.responses.retrieve(r.id) == r
    old = client.responses.create(
        model="scripted",
        prompt={"id": pid, "version": "1", "variables": {"persona": "kind"}},
        instructions="Answer in French.",
    )
    assert old.instructions == "You are kind.\n\nAnswer in French."
    assert old.prompt is not None and old.prompt.version == "1"
    assert old.output_text == "Hello from the scripted engine."  # no input, no message
    created = next(iter(client.responses.retrieve(old.id, stream=True)))
    assert created.type == "response.created" and created.response.prompt is not None
    assert created.response.prompt.version == "1"
    items = client.responses.input_items.list(r.id, order="asc").data
    assert [i.content[0].text for i in items] == ["Topic: cats", "go"]  # type: ignore[union-attr]
    queued = client.responses.create(
        model="scripted",
        prompt={"id": pid, "variables": variables},
        background=True,
        metadata=TRANSCRIPT,
    )
    deadline = time.monotonic() + 30
    while (bg := client.responses.retrieve(queued.id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # A worker builds its prompt from the log: the template as the create recorded it.
    assert (bg.output_text, bg.instructions) == ("user: Topic: cats", "Be terse, always.")
    db = ["--database-url", server.database_url]
    checked = CliRunner().invoke(main, ["verify", r.id, old.id, bg.id, *db])
    assert checked.exit_code == 0, checked.output  # the fold of each log is its response


def test_image_and_file_variables_take_their_placeholders_place_in_a_message(
    client: openai.OpenAI, server: Server, tmp_path: Path
) -> None:
    """An `input_image` or `input_file` variable is a part of the template's message where
    its placeholder was (openai-python `ResponsePromptParam.variables`)."""
    template = {"input": [{"role": "user", "content": "Look at {{photo}} and {{notes}}."}]}
    pid, _ = add(server, "--file", template_file(tmp_path, template))
    r = client.responses.create(
        model="scripted",
        prompt={
            "id": pid,
            "variables": {
                "photo": {"type": "input_image", "image_url": PNG},
                "notes": {"type": "input_file", "file_data": NOTES, "filename": "notes.txt"},
            },
        },
    )
    assert r.status == "completed"
    assert r.output_text == (
        "You said: Look at   and  . [received: image (image/png, 68 bytes), "
        "file notes.txt (text/plain, 12 bytes)]"
    )
    (message,) = client.responses.input_items.list(r.id).data
    kinds = [p.type for p in message.content]  # type: ignore[union-attr]
    assert kinds == ["input_text", "input_image", "input_text", "input_file", "input_text"]


BAD_PROMPTS: list[tuple[dict[str, Any], str, str]] = [
    ({"id": "pmpt_nope"}, "prompt.id", "Prompt with id 'pmpt_nope' not found."),
    ({"id": "{pid}", "version": "9"}, "prompt.version", "has no version '9'."),
    ({"id": "{pid}", "version": "one"}, "prompt.version", "has no version 'one'."),
    ({"id": "{pid}"}, "prompt.variables", "Missing prompt variables: who, what."),
    (
        {
            "id": "{pid}",
            "variables": {"who": {"type": "input_image", "image_url": PNG}, "what": "x"},
        },
        "prompt.variables.who",
        "an input_image cannot stand in the prompt's instructions",
    ),
    ({"id": "{theirs}"}, "prompt.id", "not found."),
]


def test_an_unknown_template_version_or_variable_is_openais_400(
    client: openai.OpenAI, server: Server
) -> None:
    """Nothing is written: the request is refused before its response is recorded. Another
    owner's template is an unknown one."""
    pid, _ = add(server, "--instructions", "{{who}} asks about {{what}}.")
    theirs, _ = add(server, "--instructions", "Hidden.", "--owner", "someone-else")
    before = server.count_rows("responses")
    for prompt, param, message in BAD_PROMPTS:
        named = {k: v.format(pid=pid, theirs=theirs) if k == "id" else v for k, v in prompt.items()}
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="scripted", prompt=named, input="hi")  # type: ignore[arg-type]
        error = caught.value.body
        assert isinstance(error, dict) and error["param"] == param, prompt
        assert message in error["message"]
    assert server.count_rows("responses") == before


def test_prompts_cli_lists_and_shows_versions_by_owner(server: Server, tmp_path: Path) -> None:
    pid, _ = add(server, "--instructions", "v1", "--owner", "cli-owner")
    add(server, "--instructions", "v2 {{x}}", "--id", pid, "--owner", "cli-owner")
    shown = json.loads(cli(server, "show", pid).stdout)
    assert (shown["id"], shown["owner"], shown["version"]) == (pid, "cli-owner", 2)
    assert shown["template"] == {"instructions": "v2 {{x}}", "input": []}
    first = json.loads(cli(server, "show", pid, "--version", "1").stdout)
    assert first["template"]["instructions"] == "v1"
    listed = json.loads(cli(server, "list", "--owner", "cli-owner", "--json").stdout)
    assert [(p["id"], p["version"]) for p in listed] == [(pid, 2)]
    table = cli(server, "list", "--owner", "cli-owner").stdout.splitlines()
    assert table[0].split() == ["ID", "OWNER", "VERSION", "CREATED", "UPDATED"]
    assert table[1].split()[:3] == [pid, "cli-owner", "2"]
    named, version = add(server, "--instructions", "mine", "--id", "pmpt_named_by_me")
    assert (named, version) == ("pmpt_named_by_me", 1)


BAD_COMMANDS = [
    (["add", "--instructions", "x", "--id", "{pid}"], "belongs to another owner"),
    (["add", "--instructions", "x", "--id", "resp_1"], "begins with 'pmpt'"),
    (["add", "--file", "{empty}"], "needs 'instructions' or 'input'"),
    (["add", "--file", "{unknown}"], "model"),
    (["add", "--file", "{broken}"], "cannot read"),
    (["show", "pmpt_never_made"], "no prompt pmpt_never_made"),
    (["show", "{pid}", "--version", "5"], "has no version 5 (its latest is 1)"),
    (["show", "{pid}", "--owner", "nobody"], "no prompt"),
]


def test_prompts_cli_refuses_bad_input_in_one_line(server: Server, tmp_path: Path) -> None:
    """Each refusal is one line and exit 1, and writes nothing."""
    pid, _ = add(server, "--instructions", "kept", "--owner", "first-owner")
    paths = {}
    for name, content in (
        ("empty", "{}"),
        ("unknown", '{"instructions": "x", "model": "m"}'),
        ("broken", "{nope"),
    ):
        paths[name] = str(tmp_path / f"{name}.json")
        (tmp_path / f"{name}.json").write_text(content)
    for args, says in BAD_COMMANDS:
        done = cli(server, *(a.format(pid=pid, **paths) for a in args))
        assert says in error_line(done), args
    shown = json.loads(cli(server, "show", pid).stdout)
    assert shown["version"] == 1 and shown["template"]["instructions"] == "kept"


def test_prompts_add_needs_exactly_one_source(server: Server) -> None:
    done = cli(server, "add")
    assert done.returncode == 2 and "--instructions TEXT or --file" in done.stderr
