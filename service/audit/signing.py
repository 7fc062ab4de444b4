"""Ed25519 keys and signed checkpoint files (`cryptography`; keys as `openssl genpkey
-algorithm ed25519` writes them, PEM PKCS#8, and their public halves as `openssl pkey
-pubout` writes them).

A checkpoint file is JSON: `statement`, the signed text itself (a JSON object: the log's
name, the format, when, how many streams, the Merkle root, the signing key's id); its
`signature` (base64 Ed25519 over the statement's UTF-8 bytes); and `leaves`, every
stream's `[id, position, digest]` in id order, from which the root is recomputed. Signing
the statement's exact text, not a re-encoding, lets any verifier check it with nothing but
an Ed25519 library (docs/guides/auditing.md, "Checking a proof by hand")."""

from __future__ import annotations

import base64
import hashlib

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from domain import chain
from domain.errors import ResplogError

FORMAT = 1


class CheckpointError(ResplogError):
    """A checkpoint or key that is not one, or does not verify."""


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


def private_key(pem: bytes, name: str = "the signing key") -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise CheckpointError(
            f"{name} is not a PEM private key without a password ({exc})"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise CheckpointError(f"{name} is a {type(key).__name__}, not an Ed25519 key")
    return key


def public_key(pem: bytes, name: str = "the public key") -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError):
        try:  # the private key will do: its public half is derived
            return private_key(pem, name).public_key()
        except CheckpointError:
            raise CheckpointError(f"{name} is not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise CheckpointError(f"{name} is a {type(key).__name__}, not an Ed25519 key")
    return key


def key_id(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def leaf_hashes(leaves: list[Leaf]) -> list[bytes]:
    return [chain.leaf_hash(chain.leaf(s, p, bytes.fromhex(d))) for s, p, d in leaves]


def sign(key: Ed25519PrivateKey, leaves: list[Leaf], created_at: float) -> Checkpoint:
    """A checkpoint over `leaves` (sorted here by id)."""
    leaves = sorted(leaves)
    root = chain.root(leaf_hashes(leaves)).hex()
    statement = Statement(
        created_at=created_at, streams=len(leaves), root=root, key_id=key_id(key.public_key())
    )
    text = msgspec.json.encode(statement)
    signature = base64.b64encode(key.sign(text)).decode()
    body = msgspec.json.encode(
        CheckpointFile(statement=text.decode(), signature=signature, leaves=leaves)
    )
    return Checkpoint(statement=statement, leaves=leaves, body=body + b"\n")


def read(body: bytes, key: Ed25519PublicKey, name: str = "the checkpoint") -> Checkpoint:
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
    try:
        key.verify(signature, raw.statement.encode())
    except InvalidSignature:
        raise CheckpointError(
            f"{name}: its signature does not verify with the public key given "
            f"(signed by key {statement.key_id[:16]}…, given {key_id(key)[:16]}…)"
        ) from None
    leaves = [tuple(leaf) for leaf in raw.leaves]
    if chain.root(leaf_hashes(leaves)).hex() != statement.root or len(leaves) != statement.streams:  # type: ignore[arg-type]
        raise CheckpointError(f"{name}: its leaves do not make its signed root")
    return Checkpoint(statement=statement, leaves=leaves, body=body)  # type: ignore[arg-type]
