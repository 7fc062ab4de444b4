"""What the chain's tests share: the CLI as a subprocess of this tree, key pairs, and a
checkpoint made in-process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from adapters.sealing.ed25519 import signer
from adapters.store.factory import open_store
from adapters.store.ledger import SqlLedger
from service.audit.chain import checkpoint as make_checkpoint

REPO = Path(__file__).resolve().parents[2]


def resplog(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = "from adapters.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=60
    )


def pem(key: Ed25519PrivateKey) -> tuple[bytes, bytes]:
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


async def checkpoint_file(url: str, path: Path, key: Path) -> None:
    """A checkpoint as `resplog checkpoint` makes it, in this process (quicker)."""
    made_by = signer(key.read_bytes())  # noqa: ASYNC240
    store = await open_store(url)
    try:
        made = await make_checkpoint(SqlLedger(store), made_by, time.time())
    finally:
        await store.close()
    path.write_bytes(made.body)  # noqa: ASYNC240
