"""The friction a newcomer hit with the `resplog` command (issue 17), each point fixed and
kept fixed, run as the real binary."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import socket
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.conftest import RESPLOG, Server, start_server, stop_server


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RESPLOG, *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def test_help_imports_no_store_and_no_server() -> None:
    """`resplog --help` is the first thing a newcomer runs: it loads the command group
    only; the store (SQLAlchemy, the drivers), the HTTP app and uvicorn are imported by the
    commands that use them (0.46 s -> 0.14 s on the build box)."""
    probe = (
        "import sys\n"
        "from adapters.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ['sqlalchemy', 'asyncpg', 'aiosqlite', 'alembic', 'litestar', 'uvicorn',"
        " 'adapters.store', 'adapters.http', 'adapters.engines']\n"
        "print('loaded:', [m for m in heavy if m in sys.modules])\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert "Usage:" in shown.stdout
    assert shown.stdout.strip().splitlines()[-1] == "loaded: []"


def test_a_named_model_is_the_only_one_a_scripted_process_serves(tmp_path: Path) -> None:
    """A replica whose engine flags name a model refuses another model's name (400
    `model_not_found`), rather than answering it with the script."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"
    engine = ("--engine", "scripted", "--scripted-delay-ms", "0", "--model", "gpt-oss-20b")
    server = start_server(url, "sqlite", tmp_path / "server.log", engine=engine)
    try:
        with openai.OpenAI(
            base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0
        ) as client:
            assert client.responses.create(model="gpt-oss-20b", input="hi").status == "completed"
            with pytest.raises(openai.BadRequestError) as refused:
                client.responses.create(model="gpt-oss-120b", input="hi")
            assert refused.value.code == "model_not_found"
            with pytest.raises(openai.BadRequestError):
                client.responses.create(model="gpt-oss-120b", input="hi", stream=True)
    finally:
        stop_server(server)


def test_ctrl_c_on_serve_drains_and_exits_0_without_aborted(tmp_path: Path) -> None:
    """Ctrl-C is how an operator stops a foreground `resplog serve`: after the drain it
    exits 0, not click's `Aborted!` and 1."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"
    server = start_server(url, "sqlite", tmp_path / "server.log")
    try:
        assert httpx.get(f"{server.base_url}/v1/models", timeout=10).status_code == 200
        server.process.send_signal(signal.SIGINT)
        code = server.process.wait(timeout=30)
    finally:
        stop_server(server)
    assert code == 0, server.log_text()
    assert "Aborted!" not in server.log_text()


def test_serve_on_a_port_in_use_is_one_line_and_never_announces(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert run("migrate", "--database-url", url).returncode == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("serve", "--database-url", url, "--port", str(port))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]


def in_terminal(*args: str, columns: int = 80) -> str:
    """What `resplog ARGS` shows in a terminal `columns` wide (a pty, as a person runs it)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns)}
    proc = subprocess.Popen(
        [RESPLOG, *args], stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True
    )
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the command closed its end
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=60)
    os.close(master)
    return out.decode().replace("\r\n", "\n")


@dataclass
class Corpus:
    url: str
    server: Server
    plain: str
    ids: list[str]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    """A SQLite database with a few responses, its server still running."""
    tmp = tmp_path_factory.mktemp("newcomer")
    url = f"sqlite+aiosqlite:///{tmp / 'db.sqlite'}"
    server = start_server(url, "sqlite", tmp / "server.log")
    try:
        with openai.OpenAI(
            base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0
        ) as client:
            first = client.responses.create(model="gpt-oss-20b", input="hello")
            second = client.responses.create(
                model="gpt-oss-20b", input="again", previous_response_id=first.id
            )
            plain = client.responses.create(model="gpt-oss-20b", input="alone")
        yield Corpus(url, server, plain.id, [first.id, second.id, plain.id])
    finally:
        stop_server(server)


def test_listings_never_cut_an_id_and_share_one_style(corpus: Corpus) -> None:
    shown = in_terminal("responses", "list", "--database-url", corpus.url, columns=80)
    for rid in corpus.ids:
        assert rid in shown, shown
    assert shown.splitlines()[0].split()[:3] == ["ID", "CREATED", "STATUS"]
    assert run("keys", "create", "--owner", "acme", "--database-url", corpus.url).returncode == 0
    keys = in_terminal("keys", "list", "--database-url", corpus.url, columns=80)
    assert keys.splitlines()[0].split()[:2] == ["ID", "OWNER"]
    assert not any(box in shown + keys for box in "┏━│└╭")


def test_summaries_count_in_english(corpus: Corpus) -> None:
    checked = run("verify", corpus.plain, "--database-url", corpus.url)
    assert checked.stdout.startswith("ok: 1 stream, "), checked.stdout
    assert "0 violations in 0 streams, 0 warnings" in checked.stdout


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    return lines[0]


def test_a_url_resplog_cannot_use_is_shown_back_in_one_line() -> None:
    for url, shown in [
        ("notaurl", "'notaurl'"),
        ("mysql://admin:hunter2@db/x", "'mysql://admin:***@db/x'"),
        ("http://example.com/db", "'http://example.com/db'"),
    ]:
        for command in (["migrate"], ["serve", "--port", "0"], ["responses", "list"]):
            line = one_error_line(run(*command, "--database-url", url))
            assert "not a database URL" in line and shown in line
            assert "hunter2" not in line and "unexpected" not in line


def test_no_command_but_migrate_creates_a_sqlite_file_and_each_says_where_it_looked(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "nowhere.db"
    url = f"sqlite:///{missing}"
    for command in (
        ["serve", "--port", "0"],
        ["worker"],
        ["keys", "list"],
        ["responses", "list"],
    ):
        line = one_error_line(run(*command, "--database-url", url))
        assert f"no SQLite database at '{missing}'" in line
        assert "resplog migrate --database-url" in line
        assert not missing.exists()
    # The default path is relative to the working directory: the error names it in full.
    line = one_error_line(run("responses", "list", cwd=tmp_path))
    assert f"no SQLite database at '{tmp_path / 'resplog.db'}'" in line


def test_a_second_serve_on_one_sqlite_file_is_refused_and_a_worker_may_join(
    corpus: Corpus,
) -> None:
    line = one_error_line(run("serve", "--database-url", corpus.url, "--port", "0"))
    path = corpus.url.split("///", 1)[1]
    assert line == (
        f"error: another resplog serve is using the SQLite database '{path}': SQLite "
        "serves one process (use PostgreSQL for replicas)"
    )
    assert "resplog listening" not in line
    with subprocess.Popen(
        [RESPLOG, "worker", "--database-url", corpus.url, "--workers", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as worker:
        try:
            assert worker.stdout is not None
            assert "resplog worker: 1 slots" in worker.stdout.readline()
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    # The first server still serves.
    with openai.OpenAI(
        base_url=f"{corpus.server.base_url}/v1", api_key="unused", max_retries=0
    ) as client:
        assert client.responses.create(model="m", input="still here").status == "completed"


def test_show_gives_every_output_item_a_status(corpus: Corpus) -> None:
    shown = run("responses", "show", corpus.plain, "--database-url", corpus.url)
    items = [x for x in shown.stdout.splitlines() if x.startswith("[")]
    assert [x.split(":")[0] for x in items] == ["[0] reasoning completed", "[1] message completed"]


def test_conversation_marks_a_turn_deleted_through_the_api(corpus: Corpus) -> None:
    first, second = corpus.ids[0], corpus.ids[1]
    with httpx.Client(base_url=corpus.server.base_url) as http:
        assert http.delete(f"/v1/responses/{first}").status_code == 200
    text = run("conversation", second, "--database-url", corpus.url).stdout
    assert text.startswith(f"Conversation of {second}: 2 turns\n")
    heads = [x for x in text.splitlines() if x.startswith("── Turn")]
    assert "· deleted 20" in heads[0] and "deleted" not in heads[1]
    view = json.loads(run("conversation", second, "--json", "--database-url", corpus.url).stdout)
    assert view["turns"][0]["deleted_at"] is not None and view["turns"][1]["deleted_at"] is None


def test_a_cancel_served_by_the_process_generating_flags_the_row_too(corpus: Corpus) -> None:
    """The row says `cancel_requested` (time and reason) for a cancel served by the process
    that generates the response, as it does for one that another replica passes on."""
    slow = {"scripted_delay_ms": "25", "scripted_tokens": "400"}
    with openai.OpenAI(
        base_url=f"{corpus.server.base_url}/v1", api_key="unused", max_retries=0
    ) as client:
        r = client.responses.create(model="m", input="x", background=True, metadata=slow)
        assert client.responses.cancel(r.id).status == "cancelled"
    shown = json.loads(
        run("responses", "show", r.id, "--json", "--database-url", corpus.url).stdout
    )
    assert shown["row"]["cancel_requested_at"] is not None
    assert shown["row"]["cancel_reason"] == "cancelled_by_user"
    assert shown["end"]["reason"] == "cancelled_by_user"


def test_the_request_log_is_one_json_line_per_request_without_prompt_or_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RESPLOG_LOG_FORMAT", "json")
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"
    server = start_server(url, "sqlite", tmp_path / "server.log")
    secret_key, prompt = "sk-do-not-log-7f3a", "a prompt that must stay out of logs"
    try:
        with openai.OpenAI(
            base_url=f"{server.base_url}/v1", api_key=secret_key, max_retries=0
        ) as client:
            plain = client.responses.create(model="m", input=prompt)
            with client.responses.create(model="m", input=prompt, stream=True) as stream:
                streamed = [e for e in stream][-1].response.id  # type: ignore[union-attr]
            client.responses.retrieve(plain.id)
            with pytest.raises(openai.NotFoundError):
                client.responses.retrieve("resp_missing")
    finally:
        stop_server(server)
    text = server.log_text()
    assert prompt not in text and secret_key not in text
    lines = [json.loads(x) for x in text.splitlines()]  # every line is JSON
    requests = [x for x in lines if x["logger"] == "resplog.requests"]
    seen = [(x["method"], x["route"], x["status"], x["response_id"]) for x in requests]
    assert seen[-4:] == [
        ("POST", "/v1/responses", 200, plain.id),
        ("POST", "/v1/responses", 200, streamed),
        ("GET", "/v1/responses/{response_id}", 200, plain.id),
        ("GET", "/v1/responses/{response_id}", 404, "resp_missing"),
    ]
    for x in requests[-4:]:
        assert x["owner"] == "anonymous" and x["request_id"].startswith("req_")
        assert isinstance(x["duration_ms"], float) and x["duration_ms"] >= 0
