"""Check a resplog inclusion proof with nothing but the proof, the checkpoint it names and
the public key that signed the checkpoint: no database, no resplog.

    python verify_proof.py PROOF.json CHECKPOINT.json PUB.pem

PROOF.json is what `resplog prove RESPONSE_ID` prints (or `GET /v1/responses/{id}/proof`
answers); CHECKPOINT.json a checkpoint file (`resplog checkpoint`, or `GET
/v1/audit/checkpoints/latest`). Exit 0 and "included" when the checkpoint's signature
verifies and the proof's leaf is in its Merkle tree (RFC 9162, section 2.1.3.2); else one
line saying why, and exit 1. Needs Python 3.9+ and the `cryptography` package.
"""

import base64
import hashlib
import json
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.serialization import load_pem_public_key


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def root_from_path(leaf: bytes, index: int, size: int, path: list) -> bytes:
    """RFC 9162 2.1.3.2: the root that `path` makes of the leaf at `index` of `size`."""
    fn, sn, r = index, size - 1, sha256(b"\x00" + leaf)
    for p in path:
        if sn == 0:
            raise ValueError("the path is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = sha256(b"\x01" + p + r)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = sha256(b"\x01" + r + p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ValueError("the path is shorter than the tree is deep")
    return r


def check(proof: dict, checkpoint: dict, key_pem: bytes) -> str:
    if proof["statement"] != checkpoint["statement"]:
        return "the proof is for another checkpoint"
    try:
        signature = base64.b64decode(checkpoint["signature"])
        load_pem_public_key(key_pem).verify(signature, checkpoint["statement"].encode())
    except (InvalidSignature, ValueError, TypeError):
        return "the checkpoint's signature does not verify with this key"
    statement = json.loads(checkpoint["statement"])
    if proof["size"] != statement["streams"]:
        return "the proof's tree is not the checkpoint's"
    leaf = b"%s\x00%d\x00%s" % (
        proof["stream_id"].encode(),
        proof["position"],
        bytes.fromhex(proof["digest"]),
    )
    try:
        path = [bytes.fromhex(p) for p in proof["path"]]
        root = root_from_path(leaf, proof["index"], proof["size"], path)
    except ValueError as exc:
        return str(exc)
    if root.hex() != statement["root"]:
        return "the leaf is not in the checkpoint's tree"
    return ""


def main(argv: list) -> int:
    with open(argv[1]) as p, open(argv[2]) as c, open(argv[3], "rb") as k:
        why = check(json.load(p), json.load(c), k.read())
    if why:
        print(f"NOT included: {why}")
        return 1
    print("included")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
