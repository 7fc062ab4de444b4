"""`resplog verify`: re-fold every stream (or the given ones) and report each violation of
the log's invariants with its stream and position; exit 1 if there is any.

The use-case is `service/audit/verifying.py`. `--all --jobs N` checks the responses in N
processes, each a slice of them in the scan's order (`StreamScan.cuts`), while this one
checks the orphaned streams and, after, the conversations: a stream is folded in Python, a
CPU's work (about 20 µs an event), so one process is what held a whole-log check back
(docs/performance.md, "verify --all")."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import queue as queues
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click
import msgspec

from adapters.cli.common import database_option, main, replica_option
from adapters.cli.output import Bar, counted, print_json
from adapters.cli.params import Duration, json_option, progress_option, response_id
from adapters.cli.store import opened, run
from domain.errors import ResplogError
from service.audit.progress import Progress
from service.audit.verifying import Emit, Report, Verifier, verify_log
from service.ports import Selection

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess
    from multiprocessing.queues import Queue

    from service.bundle import Audit


def summary(report: Report) -> str:
    bad = len({f.stream_id for f in report.violations})
    head = "ok" if report.ok else "FAILED"
    return (
        f"{head}: {counted(report.streams, 'stream')}, {counted(report.events, 'event')} "
        f"checked; {counted(len(report.violations), 'violation')} in "
        f"{counted(bad, 'stream')}, {counted(len(report.warnings), 'warning')}"
    )


# --- --all --jobs N ------------------------------------------------------------------------


class _Relay:
    """A part's progress, sent to the parent a few times a second rather than per event."""

    def __init__(self, out: Queue[Any]) -> None:
        self.out = out
        self.streams = self.events = 0
        self.sent = time.monotonic()

    def stream(self, n: int = 1) -> None:
        self.streams += n
        if time.monotonic() - self.sent > 0.25:
            self.flush()

    def event(self, n: int = 1) -> None:
        self.events += n

    def done(self) -> None:
        pass

    def flush(self) -> None:
        self.out.put(("progress", self.streams, self.events))
        self.streams = self.events = 0
        self.sent = time.monotonic()


def _part(
    index: int,
    url: str,
    replica_url: str | None,
    selection: Selection,
    stale_after: float,
    out: Queue[Any],
) -> None:
    """One part of `verify --all --jobs N`, in a process of its own: its findings as it
    makes them, its progress, then its report (or why it could not finish) to the parent."""

    async def work() -> Report:
        exit_with_parent()
        async with opened(url, replica_url=replica_url) as audit:
            relay = _Relay(out)
            verifier = Verifier(audit.log, relay, stale_after, lambda f: out.put(("finding", f)))
            await verifier.run(audit.scan.streams(selection))
            relay.flush()
            return verifier.report

    try:
        out.put(("done", index, run(work())))
    except ResplogError as exc:  # the store's own: "cannot use the database …"
        out.put(("failed", str(exc)))
    except Exception as exc:
        out.put(("failed", f"unexpected {type(exc).__name__}: {exc}"))


def exit_with_parent() -> None:
    """End this part's process the moment its parent is gone, killed included (a `daemon`
    process is stopped only by a parent that exits normally), rather than read on for
    nobody: the parent's sentinel, a pipe, becomes readable when the parent ends."""
    parent = multiprocessing.parent_process()
    if parent is not None and parent.sentinel is not None:
        asyncio.get_running_loop().add_reader(parent.sentinel, os._exit, 1)


async def _parts(
    audit: Audit,
    url: str,
    replica_url: str | None,
    jobs: int,
    stale_after: float,
    bar: Progress,
    emit: Emit | None,
) -> Report:
    """Every response stream in `jobs` processes, the orphans here meanwhile."""
    cuts = await audit.scan.cuts(Selection(), jobs)
    slices = [
        Selection(after=a, through=b) for a, b in zip([None, *cuts], [*cuts, None], strict=True)
    ]
    context = multiprocessing.get_context("spawn")  # no copy of this process's loop or pool
    out: Queue[Any] = context.Queue()
    procs = [
        context.Process(
            target=_part, args=(i, url, replica_url, part, stale_after, out), daemon=True
        )
        for i, part in enumerate(slices)
    ]
    for proc in procs:
        proc.start()
    try:
        here = Verifier(audit.log, bar, stale_after, emit)
        gathering = asyncio.ensure_future(_gather(out, procs, bar, emit))
        try:
            await here.run(audit.scan.orphans())
        except BaseException:
            gathering.cancel()
            raise
        report = Report()
        for part in await gathering:
            report.add(part)
        report.add(here.report)
        return report
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
            proc.join()


async def _gather(
    out: Queue[Any], procs: Sequence[BaseProcess], bar: Progress, emit: Emit | None
) -> list[Report]:
    """The parts' reports, in the order of their slices; their findings and progress
    passed on as they come."""
    reports: dict[int, Report] = {}
    while len(reports) < len(procs):
        try:
            message = await asyncio.to_thread(out.get, True, 0.5)
        except queues.Empty:
            lost = [p for i, p in enumerate(procs) if p.exitcode is not None and i not in reports]
            if lost:  # a part that ended without a word: killed, or out of memory
                raise ResplogError(
                    f"a verify process ended without its report (exit code {lost[0].exitcode})"
                ) from None
            continue
        kind, *rest = message
        if kind == "progress":
            bar.stream(rest[0])
            bar.event(rest[1])
        elif kind == "finding":
            if emit is not None:
                emit(rest[0])
        elif kind == "failed":
            raise ResplogError(rest[0])
        else:
            reports[rest[0]] = rest[1]
    return [reports[i] for i in range(len(procs))]


def _chain_options(f: Any) -> Any:
    for option in reversed(
        (
            click.option(
                "--chain",
                is_flag=True,
                help="Also check each stream's hash chain: every event's digest, and the "
                "row's head (implied by --checkpoint and --file).",
            ),
            click.option(
                "--checkpoint",
                "checkpoint_paths",
                multiple=True,
                metavar="FILE",
                help="A checkpoint (resplog checkpoint) the log must extend: each stream it "
                "recorded still there, its chain through the recorded digest. Repeatable: "
                "the checkpoints must also be consistent with each other; given alone "
                "(no ids, --all or --file), only that is checked.",
            ),
            click.option(
                "--public-key",
                "key_path",
                metavar="PUB.pem",
                help="The Ed25519 public key the checkpoints are signed with (needed with "
                "--checkpoint).",
            ),
            click.option(
                "--file",
                "export_path",
                metavar="EXPORT.jsonl",
                help="Check an export file's chains (and against --checkpoint) with no database.",
            ),
        )
    ):
        f = option(f)
    return f


@main.command()
@database_option
@click.argument("ids", nargs=-1, metavar="[ID]...")
@click.option("--all", "everything", is_flag=True, help="Every stream in the database.")
@click.option(
    "--stale-after",
    type=Duration,
    default="10m",
    show_default=True,
    help="Warn about a running response whose lease expired (or, without a lease, whose "
    "last event was) longer ago than this.",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="With --all: check the responses in N processes at once, a slice of them each "
    "(a core each; the database serves them all). The findings are the same; their lines "
    "come in the order they are found.",
)
@_chain_options
@replica_option
@progress_option
@json_option
def verify(
    database_url: str,
    ids: tuple[str, ...],
    everything: bool,
    stale_after: float,
    jobs: int,
    chain: bool,
    checkpoint_paths: tuple[str, ...],
    key_path: str | None,
    export_path: str | None,
    replica_database_url: str | None,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Check the log's invariants: dense positions, one terminal event and it is last, legal
    transitions, the read model equals the fold, the request in the first event; with
    --all, every conversation's stream against its read model too; with --chain or
    --checkpoint, the hash chains and the signed checkpoints (docs/guides/auditing.md)."""
    if checkpoint_paths and key_path is None:
        raise click.UsageError("--checkpoint needs --public-key")
    if export_path is not None and (ids or everything):
        raise click.UsageError("--file checks an export, not the database: no ids nor --all")
    alone = not ids and not everything and export_path is None
    if alone and not checkpoint_paths:
        raise click.UsageError("give response ids or --all")
    if jobs > 1 and not everything:
        raise click.UsageError("--jobs is for --all")
    for rid in ids:
        response_id(rid)
    emit: Emit | None = None if as_json else lambda finding: click.echo(finding.line())
    from adapters.cli.chain import checkpoints, public_key

    taken = checkpoints(checkpoint_paths, public_key(key_path)) if key_path else []
    chained = chain or bool(taken)
    reports: dict[str, Report] = {}
    if len(taken) > 1 or alone:
        from service.audit.chain import consistent

        reports["checkpoints"] = consistent(taken, emit)
    if export_path is not None:
        reports["chain"] = _offline(export_path, taken, emit)
    elif not alone:
        reports.update(
            run(
                _online(
                    database_url,
                    replica_database_url,
                    ids,
                    everything,
                    stale_after,
                    jobs,
                    chained,
                    taken,
                    emit,
                    progress,
                )
            )
        )
    ok = all(r.ok for r in reports.values())
    if as_json:
        print_json(
            {"ok": ok, **{k: msgspec.structs.asdict(r) for k, r in reports.items()}}
            if set(reports) != {"log"}
            else {"ok": ok, **msgspec.structs.asdict(reports["log"])}
        )
    else:
        for kind, report in reports.items():
            click.echo(summary(report) if kind == "log" else f"{kind}: {summary(report)}")
    if not ok:
        raise click.exceptions.Exit(1)


async def _online(
    database_url: str,
    replica_url: str | None,
    ids: tuple[str, ...],
    everything: bool,
    stale_after: float,
    jobs: int,
    chained: bool,
    taken: list[Any],
    emit: Emit | None,
    progress: bool | None,
) -> dict[str, Report]:
    reports: dict[str, Report] = {}
    async with opened(database_url, replica_url=replica_url) as audit:

        async def parts(bar: Progress) -> Report:
            return await _parts(audit, database_url, replica_url, jobs, stale_after, bar, emit)

        reports["log"] = await verify_log(
            audit,
            list(dict.fromkeys(ids)),
            stale_after=stale_after,
            progress=lambda total: Bar("verifying", total, False if len(ids) == 1 else progress),
            emit=emit,
            conversations=everything,
            parts=parts if jobs > 1 else None,
        )
        if chained:
            from service.audit.chain import verify_chain

            streams = None if everything else list(dict.fromkeys(ids))
            reports["chain"] = await verify_chain(audit.ledger, taken, streams, emit)
    return reports


def _offline(path: str, taken: list[Any], emit: Emit | None) -> Report:
    """An export's chains, and the checkpoints' streams it holds, with no database."""
    from service.audit.archive import chain_rows
    from service.audit.chain import check_rows

    try:
        with open(path, "rb") as lines:
            rows = list(chain_rows(lines))
    except OSError as exc:
        raise ResplogError(f"cannot read the export {path!r}: {exc.strerror}") from None
    present = {r.stream_id for r in rows}
    from service.audit.signing import Checkpoint

    held = [
        Checkpoint(
            statement=c.statement,
            leaves=[leaf for leaf in c.leaves if leaf[0] in present],
            body=c.body,
        )
        for c in taken
    ]
    pages = [rows]
    check_stored = all(r.digest is not None for r in rows)
    return run(check_rows(pages, None, held, emit, complete=False, check_stored=check_stored))
