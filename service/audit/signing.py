"""Signed checkpoint files; the keys (Ed25519) are adapters/sealing/ed25519.py's.

A checkpoint file is JSON: `statement`, the signed text itself (a JSON object: the log's
name, the format, when, how many streams, the Merkle root, the signing key's id); its
`signature` (base64 Ed25519 over the statement's UTF-8 bytes); and `leaves`, every
stream's `[id, position, digest]` in id order, from which the root is recomputed. Signing
the statement's exact text, not a re-encoding, lets any verifier check it with nothing but
an Ed25519 library (docs/guides/auditing.md, "Checking a proof by hand")."""

from __future__ import annotations

import base64
from typing import Protocol

import msgspec

from domain import chain
from domain.errors import ResplogError

FORMAT = 1


class CheckpointError(ResplogError):
    """A checkpoint or key that is not one, or does not verify."""


class PublicKey(Protocol):
    """What checks a checkpoint's signature (adapters/sealing/ed25519.py)."""

    key_id: str  # hex SHA-256 of the raw public key

    def verify(self, signature: bytes, message: bytes) -> bool: ...


class Signer(Protocol):
    """What signs a checkpoint (adapters/sealing/ed25519.py)."""

    key_id: str

    def sign(self, message: bytes) -> bytes: ...


class Statement(msgspec.Struct, frozen=True, kw_only=True):
    log: str = "resplog"
    format: int = FORMAT
    created_at: float
    streams: int
    root: str  # hex Merkle root over the leaves (domain/chain.py)
    key_id: str  # hex SHA-256 of the raw public key


Leaf = tuple[str, int, str]  # (stream id, head position, head digest hex)


class CheckpointFile(msgspec.Struct, frozen=True, kw_only=True):
    statement: str
    signature: str
    leaves: list[Leaf]


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    """A checkpoint read and checked: its statement, its leaves, its file's bytes."""

    statement: Statement
    leaves: list[Leaf]
    body: bytes

    def heads(self) -> dict[str, tuple[int, str]]:
        return {sid: (pos, digest) for sid, pos, digest in self.leaves}


_file = msgspec.json.Decoder(CheckpointFile)
_statement = msgspec.json.Decoder(Statement)


def leaf_hashes(leaves: list[Leaf]) -> list[bytes]:
    return [chain.leaf_hash(chain.leaf(s, p, bytes.fromhex(d))) for s, p, d in leaves]


def sign(key: Signer, leaves: list[Leaf], created_at: float) -> Checkpoint:
    """A checkpoint over `leaves` (sorted here by id)."""
    leaves = sorted(leaves)
    root = chain.root(leaf_hashes(leaves)).hex()
    statement = Statement(created_at=created_at, streams=len(leaves), root=root, key_id=key.key_id)
    text = msgspec.json.encode(statement)
    signature = base64.b64encode(key.sign(text)).decode()
    body = msgspec.json.encode(
        CheckpointFile(statement=text.decode(), signature=signature, leaves=leaves)
    )
    return Checkpoint(statement=statement, leaves=leaves, body=body + b"\n")


def read(body: bytes, key: PublicKey, name: str = "the checkpoint") -> Checkpoint:
    """The checkpoint in `body`, its signature checked with `key` and its leaves against
    its root; `CheckpointError` saying which check failed."""
    try:
        raw = _file.decode(body)
        statement = _statement.decode(raw.statement)
        signature = base64.b64decode(raw.signature, validate=True)
    except (msgspec.DecodeError, ValueError) as exc:
        raise CheckpointError(f"{name} is not a resplog checkpoint ({exc})") from None
    if statement.format != FORMAT:
        raise CheckpointError(f"{name} has format {statement.format}; this resplog reads {FORMAT}")
    if not key.verify(signature, raw.statement.encode()):
        raise CheckpointError(
            f"{name}: its signature does not verify with the public key given "
            f"(signed by key {statement.key_id[:16]}…, given {key.key_id[:16]}…)"
        )
    leaves = [tuple(leaf) for leaf in raw.leaves]
    if chain.root(leaf_hashes(leaves)).hex() != statement.root or len(leaves) != statement.streams:  # type: ignore[arg-type]
        raise CheckpointError(f"{name}: its leaves do not make its signed root")
    return Checkpoint(statement=statement, leaves=leaves, body=body)  # type: ignore[arg-type]
