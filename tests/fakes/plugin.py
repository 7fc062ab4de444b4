"""pytest fixtures that start the fake engines as processes on free ports.

Use from a conftest: `from tests.fakes.plugin import *  # noqa: F403`, or
`pytest_plugins = ["tests.fakes.plugin"]` in the root conftest. Session-scoped servers are
shared; the function-scoped fixtures reset their logs first.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.process import FakeProcess

SGLANG = "tests.fakes.sglang_server"
CHAT = "tests.fakes.chat_server"
API_KEY = "sk-fake-engine-key"


def _serve(module: str, *args: str) -> Iterator[FakeProcess]:
    fake = FakeProcess(module, *args)
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="session")
def fake_sglang_server() -> Iterator[FakeProcess]:
    """sglang 0.5.23 defaults: cumulative `text` and `output_ids`."""
    yield from _serve(SGLANG, "--style", "cumulative")


@pytest.fixture(scope="session")
def fake_sglang_incremental_server() -> Iterator[FakeProcess]:
    """sglang with `--incremental-streaming-output`, two tokens per chunk."""
    yield from _serve(SGLANG, "--style", "incremental", "--tokens-per-chunk", "2")


@pytest.fixture(scope="session")
def fake_sglang_legacy_server() -> Iterator[FakeProcess]:
    """sglang 0.5.2: ids always deltas, only `/get_model_info`."""
    yield from _serve(SGLANG, "--style", "ids_delta", "--legacy-info")


@pytest.fixture(scope="session")
def fake_sglang_keyed_server() -> Iterator[FakeProcess]:
    """sglang started with `--api-key`."""
    yield from _serve(SGLANG, "--api-key", API_KEY)


@pytest.fixture(scope="session")
def fake_chat_server() -> Iterator[FakeProcess]:
    """An OpenAI-compatible `/v1/chat/completions` server."""
    yield from _serve(CHAT)


def _fresh(server: FakeProcess) -> FakeProcess:
    server.reset()
    return server


@pytest.fixture
def fake_sglang(fake_sglang_server: FakeProcess) -> FakeProcess:
    return _fresh(fake_sglang_server)


@pytest.fixture
def fake_sglang_incremental(fake_sglang_incremental_server: FakeProcess) -> FakeProcess:
    return _fresh(fake_sglang_incremental_server)


@pytest.fixture
def fake_sglang_legacy(fake_sglang_legacy_server: FakeProcess) -> FakeProcess:
    return _fresh(fake_sglang_legacy_server)


@pytest.fixture
def fake_sglang_keyed(fake_sglang_keyed_server: FakeProcess) -> FakeProcess:
    return _fresh(fake_sglang_keyed_server)


@pytest.fixture
def fake_chat(fake_chat_server: FakeProcess) -> FakeProcess:
    return _fresh(fake_chat_server)


@pytest.fixture
def fake_sglang_doomed() -> Iterator[FakeProcess]:
    """A server of its own, for a test that kills it."""
    yield from _serve(SGLANG, "--token-delay", "0.01")
