"""`resplog checkpoint`: a signed checkpoint of the log as it is (service/audit/chain.py);
and the key and checkpoint files that `checkpoint` and `verify` read."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from adapters.cli.common import database_option, main
from adapters.cli.store import opened, run
from domain.errors import ResplogError

if TYPE_CHECKING:
    from adapters.sealing.ed25519 import Ed25519Signer, Ed25519Verifier
    from service.audit.signing import Checkpoint


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ResplogError(f"cannot read {what} {path!r}: {exc.strerror}") from None


def signing_key(path: str) -> Ed25519Signer:
    from adapters.sealing.ed25519 import signer

    return signer(_read(path, "the signing key"), f"the signing key {path!r}")


def public_key(path: str) -> Ed25519Verifier:
    from adapters.sealing.ed25519 import verifier

    return verifier(_read(path, "the public key"), f"the public key {path!r}")


def checkpoints(paths: tuple[str, ...], key: Ed25519Verifier) -> list[Checkpoint]:
    from service.audit.signing import read

    return [read(_read(p, "the checkpoint"), key, f"the checkpoint {p!r}") for p in paths]


@main.command()
@database_option
@click.option(
    "--signing-key",
    "key_path",
    required=True,
    metavar="KEY.pem",
    help="The Ed25519 private key that signs it (openssl genpkey -algorithm ed25519).",
)
@click.option(
    "--out",
    metavar="FILE",
    help="Write the checkpoint here (default: standard output). An existing file is refused.",
)
@click.option(
    "--save",
    is_flag=True,
    help="Also keep it in the database's checkpoints (what GET /v1/audit/checkpoints/latest "
    "serves).",
)
def checkpoint(database_url: str, key_path: str, out: str | None, save: bool) -> None:
    """Write a signed checkpoint: the Merkle root over every stream's (id, head position,
    head digest), their count and the time, signed with Ed25519, and the heads themselves.
    Hand it to the auditor (or a witness); `resplog verify --checkpoint` checks the log
    against it later."""
    from service.audit.chain import checkpoint as make

    key = signing_key(key_path)
    if out is not None and Path(out).exists():
        raise ResplogError(f"{out!r} exists; a checkpoint is never written over another")

    async def work() -> Checkpoint:
        async with opened(database_url) as audit:
            made = await make(audit.ledger, key, time.time())
            if save:
                await audit.ledger.save_checkpoint(
                    made.statement.created_at, made.statement.root, made.body
                )
            return made

    made = run(work())
    if out is None:
        sys.stdout.buffer.write(made.body)
    else:
        Path(out).write_bytes(made.body)
        click.echo(
            f"checkpoint of {made.statement.streams} streams, root {made.statement.root}, "
            f"written to {out}",
            err=True,
        )


@main.command()
@database_option
@click.argument("ids", nargs=-1, metavar="[RESPONSE_ID]...")
@click.option("--conversation", "conversation", metavar="ID", help="Erase this conversation.")
@click.option("--owner", metavar="OWNER", help="Erase every response and conversation of OWNER.")
@click.option(
    "--reason",
    required=True,
    help="Why (recorded with the erasure and shown by reads; never the content itself).",
)
def erase(
    database_url: str,
    ids: tuple[str, ...],
    conversation: str | None,
    owner: str | None,
    reason: str,
) -> None:
    """Erase the content of responses or conversations (text, instructions, tool arguments
    and outputs, reasoning, images and files, metadata values), keeping each event's type,
    position and digest, the lifecycle, timings and usage, and an erasure record: the
    chain still verifies, against checkpoints taken before too. A running response is
    refused (cancel it first); erasing twice does nothing the second time."""
    from adapters.cli.params import response_id
    from service.audit.erasing import erase as run_erase
    from service.audit.erasing import targets

    if not ids and conversation is None and owner is None:
        raise click.UsageError("give response ids, --conversation or --owner")
    for rid in ids:
        response_id(rid)

    async def work() -> list[object]:
        async with opened(database_url) as audit:
            found = await targets(audit, ids, conversation, owner)
            return list(await run_erase(audit, found, reason))

    from service.audit.erasing import Erased

    for done in run(work()):
        assert isinstance(done, Erased)
        if done.already:
            click.echo(f"{done.stream_id}: already erased")
        else:
            click.echo(f"{done.stream_id}: erased ({done.events} events)")


@main.command()
@database_option
@click.argument("rid", metavar="RESPONSE_ID")
@click.option(
    "--checkpoint",
    "checkpoint_path",
    metavar="FILE",
    help="Prove against this checkpoint file (default: the latest the database keeps).",
)
def prove(database_url: str, rid: str, checkpoint_path: str | None) -> None:
    """Print (JSON) the inclusion proof of a response's head in a signed checkpoint, which
    docs/guides/verify_proof.py checks from the proof, the checkpoint and the public key
    alone."""
    import msgspec

    from adapters.cli.params import response_id
    from service.audit.chain import Proof
    from service.audit.chain import prove as make

    response_id(rid)
    body = None if checkpoint_path is None else _read(checkpoint_path, "the checkpoint")

    async def work() -> Proof:
        async with opened(database_url) as audit:
            return await make(audit.ledger, rid, body)

    click.echo(msgspec.json.encode(run(work())).decode())
