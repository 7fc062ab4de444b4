"""Ed25519 keys for signed checkpoints (`cryptography`): keys as `openssl genpkey -algorithm
ed25519` writes them (PEM PKCS#8), public halves as `openssl pkey -pubout` writes them.
They implement the `Signer` and `PublicKey` of service/audit/signing.py."""

from __future__ import annotations

import hashlib

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from service.audit.signing import CheckpointError


def _key_id(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


class Ed25519Verifier:
    def __init__(self, key: Ed25519PublicKey) -> None:
        self._key = key
        self.key_id = _key_id(key)

    def verify(self, signature: bytes, message: bytes) -> bool:
        try:
            self._key.verify(signature, message)
        except InvalidSignature:
            return False
        return True


class Ed25519Signer:
    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.public = Ed25519Verifier(key.public_key())
        self.key_id = self.public.key_id

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)


def signer(pem: bytes, name: str = "the signing key") -> Ed25519Signer:
    """The private key in `pem`; `CheckpointError` for what is not an Ed25519 one."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise CheckpointError(
            f"{name} is not a PEM private key without a password ({exc})"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise CheckpointError(f"{name} is a {type(key).__name__}, not an Ed25519 key")
    return Ed25519Signer(key)


def verifier(pem: bytes, name: str = "the public key") -> Ed25519Verifier:
    """The public key in `pem` (a private key will do: its public half is taken)."""
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError):
        try:
            return signer(pem, name).public
        except CheckpointError:
            raise CheckpointError(f"{name} is not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise CheckpointError(f"{name} is a {type(key).__name__}, not an Ed25519 key")
    return Ed25519Verifier(key)
