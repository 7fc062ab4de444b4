"""Reasoning sealed with AES-256-GCM under the server's keys (the `Sealer` port of
service/reasoning/sealing.py).

Keys: `--reasoning-key` takes one or more base64 32-byte keys, comma-separated; the first
seals, every one opens, so a key is rotated by putting the new one first and dropping the
old one once no client holds its blobs. Every process that serves or generates must have
the same keys. Without the flag each process makes a key of its own at start (logged):
blobs then open only in the process that sealed them, until it restarts.

Blob: `rsv1.` + base64url(key id (the key's SHA-256, 4 bytes), nonce (12 bytes), the
sealed JSON `{"summary": [...], "content": [...]}` with its tag).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
from collections.abc import Sequence

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from domain.objects import ReasoningText, SummaryText
from service.reasoning.sealing import Sealed

PREFIX = "rsv1."
log = logging.getLogger("resplog.sealing")


class AesGcmSealer:
    """Seals and opens reasoning under the server's keys (the first one seals)."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys or any(len(k) != 32 for k in keys):
            raise ValueError("reasoning keys are 32 bytes each, at least one")
        self._keys = {hashlib.sha256(k).digest()[:4]: AESGCM(k) for k in keys}
        self._warn = False
        self._current = hashlib.sha256(keys[0]).digest()[:4]

    @classmethod
    def from_setting(cls, value: str | None) -> tuple[AesGcmSealer, bool]:
        """The sealer of `--reasoning-key` (comma-separated base64 keys), and whether the key
        was made here because none was given (it then says so at its first seal)."""
        if not value:
            made = cls([os.urandom(32)])
            made._warn = True
            return made, True
        try:
            keys = [base64.b64decode(k.strip(), validate=True) for k in value.split(",")]
        except (binascii.Error, ValueError) as exc:
            raise ValueError("--reasoning-key: not base64") from exc
        return cls(keys), False

    def seal(
        self, summary: list[SummaryText], content: list[ReasoningText], source: str | None = None
    ) -> str:
        if self._warn:
            self._warn = False
            log.warning(
                "sealing reasoning with a key of this process's own (no --reasoning-key): "
                "the blob opens only here, until this process restarts"
            )
        nonce = os.urandom(12)
        plain = msgspec.json.encode(Sealed(summary, content, source))
        sealed = self._keys[self._current].encrypt(nonce, plain, None)
        return PREFIX + base64.urlsafe_b64encode(self._current + nonce + sealed).decode()

    def open(self, blob: str) -> Sealed | None:
        """The reasoning in `blob`, or None if it is not one of this server's (another key,
        another server, or tampered with)."""
        if not blob.startswith(PREFIX):
            return None
        try:
            raw = base64.urlsafe_b64decode(blob[len(PREFIX) :])
            key = self._keys.get(raw[:4])
            if key is None or len(raw) < 16:
                return None
            return msgspec.json.decode(key.decrypt(raw[4:16], raw[16:], None), type=Sealed)
        except (binascii.Error, ValueError, InvalidTag, msgspec.DecodeError):
            return None
