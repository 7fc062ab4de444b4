"""Helpers for the multi-process tests: `resplog worker` processes, a private PostgreSQL
cluster the tests may stop and restart (the shared server never is), and the fold check
every log must pass (a stand-in for `resplog verify`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import asyncpg
import msgspec
import sqlalchemy as sa

from adapters.store.factory import open_store
from adapters.store.tables import responses as t_responses
from domain.events import EndFacts
from domain.fold.replay import project, replay
from domain.objects import TERMINAL_STATUSES, ResponseObject
from tests.e2e.conftest import RESPLOG, free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")


@dataclass
class Worker:
    """A running `resplog worker` and the file its output goes to."""

    log_path: Path
    process: subprocess.Popen[bytes]
    log_file: BinaryIO

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_worker(database_url: str, log_path: Path, *extra: str) -> Worker:
    log = log_path.open("wb")
    process = subprocess.Popen(
        [RESPLOG, "worker", "--database-url", database_url, "--engine", "scripted", *extra],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    worker = Worker(log_path, process, log)
    deadline = time.monotonic() + 30
    while "resplog worker:" not in worker.log_text():
        if process.poll() is not None or time.monotonic() > deadline:
            stop(worker.process, worker.log_file, kill=True)
            raise RuntimeError(f"worker did not start: {worker.log_text()}")
        time.sleep(0.05)
    return worker


def stop(process: subprocess.Popen[bytes], log_file: BinaryIO, *, kill: bool = False) -> int:
    """SIGTERM (or SIGKILL) and wait; the exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
    try:
        code = process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        code = process.wait()
    log_file.close()
    return code


# --- a private PostgreSQL -----------------------------------------------------------------


class PrivatePostgres:
    """A throwaway cluster on a free port, in a directory of its own, run as the `postgres`
    user when the tests run as root (PostgreSQL refuses to run as root)."""

    def __init__(
        self,
        *,
        standby_of: PrivatePostgres | None = None,
        backup: Path | None = None,
        recovery: str = "",
        wal_segment_mb: int | None = None,
    ) -> None:
        """A fresh cluster, a streaming standby of a running `standby_of` (a base backup
        with `-R`: it follows the primary from its first start, until promoted), or a copy
        of the base backup in `backup` that recovers with the `recovery` settings (lines
        of postgresql.conf: a restore_command, a recovery target) at its first start.
        `wal_segment_mb`: a fresh cluster's WAL segment size (small: quick to archive)."""
        self.root = Path(tempfile.mkdtemp(prefix="resplog-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.options = ""  # more `-c name=value` settings for `start`
        self._as_postgres = os.geteuid() == 0
        self._frozen: list[int] = []
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        if backup is not None:
            shutil.copytree(backup, self.data)
            self.data.chmod(0o700)
            with (self.data / "postgresql.conf").open("a") as conf:
                conf.write(f"\narchive_mode = off\n{recovery}\n")
            (self.data / "recovery.signal").touch()
            if self._as_postgres:
                subprocess.run(["chown", "-R", "postgres:postgres", self.data], check=True)
        elif standby_of is None:
            initdb = (PG_BIN / "initdb", "-D", self.data, "-A", "trust", "-U", "postgres")
            segments = () if wal_segment_mb is None else (f"--wal-segsize={wal_segment_mb}",)
            self._run(*initdb, *segments, "--no-sync")
        else:
            source = ("-h", "127.0.0.1", "-p", standby_of.port, "-U", "postgres")
            backup = (PG_BIN / "pg_basebackup", "-D", self.data, *source, "-R", "-X", "stream")
            self._run(*backup, "--no-sync")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def dsn(self, database: str = "postgres") -> str:
        """The URL as asyncpg and libpq take it."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def archive_to(self, archive: Path) -> None:
        """WAL archiving into `archive` from the next start on (`cp`, as the PostgreSQL
        documentation's example; a segment is archived once, never overwritten)."""
        archive.mkdir(parents=True, exist_ok=True)
        if self._as_postgres:
            shutil.chown(archive, "postgres", "postgres")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                "\nwal_level = replica\narchive_mode = on\n"
                f"archive_command = 'test ! -f {archive}/%f && cp %p {archive}/%f'\n"
            )

    def base_backup(self, into: Path) -> None:
        """`pg_basebackup` of this running cluster into `into` (which must not exist, in a
        directory the `postgres` user may write): a checkpoint at once (`-c fast`), the WAL
        it needs streamed beside it."""
        source = ("-h", "127.0.0.1", "-p", self.port, "-U", "postgres")
        self._run(PG_BIN / "pg_basebackup", "-D", into, *source, "-c", "fast", "-X", "stream")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        options += self.options
        self._ctl("start", "-w", "-o", options, "-l", self.root / "server.log")

    def stop(self) -> None:
        self._ctl("stop", "-w", "-m", "fast")

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend at once: the host is gone (a postmaster
        killed alone leaves its backends serving their connections for a while)."""
        for pid in self._processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self._is_up() and time.monotonic() < deadline:
            time.sleep(0.02)

    def _is_up(self) -> bool:
        ready = [str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-t", "1"]
        return subprocess.run(ready, capture_output=True, check=False).returncode == 0

    def promote(self) -> None:
        """A standby becomes a primary (what a failover tool does once the old one is gone)."""
        self._ctl("promote", "-w")

    def freeze(self) -> None:
        """SIGSTOP the postmaster and every backend: the database neither answers nor
        refuses (as a hung host or a network partition), until `thaw`."""
        # The postmaster first, so it forks no backend after the list is read; a backend
        # that exits between the list and its signal (a client just gone) is skipped.
        main = self._processes()[0]
        os.kill(main, signal.SIGSTOP)
        self._frozen = [main]
        for pid in self._processes()[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                self._frozen.append(pid)

    def thaw(self) -> None:
        for pid in self._frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self._frozen = []

    def _processes(self) -> list[int]:
        main = int((self.data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(
            ["pgrep", "-P", str(main)], capture_output=True, text=True, check=False
        ).stdout.split()
        return [main, *map(int, children)]

    def destroy(self) -> None:
        self.thaw()
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.CalledProcessError):  # killed: a stale pid file
                self._ctl("stop", "-w", "-m", "immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def _ctl(self, *args: object) -> None:
        self._run(PG_BIN / "pg_ctl", "-D", self.data, *args)

    def _run(self, *args: object) -> None:
        command = [str(a) for a in args]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=60, cwd=self.root)


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """Started; destroyed afterwards. If it cannot start, the test fails (never skips)."""
    cluster = PrivatePostgres()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@contextmanager
def replicated_postgres(options: str = "") -> Iterator[tuple[PrivatePostgres, PrivatePostgres]]:
    """A primary and its synchronous streaming standby, started: a commit returns only once
    the standby has the WAL, so a standby promoted after the primary dies has every commit
    a client was told of. Given on the command line, not in postgresql.conf, so that the
    promoted standby (whose files are a copy) does not wait for a standby of its own.
    `options`: more `-c name=value` settings for both."""
    primary = PrivatePostgres()
    primary.options = f" -c synchronous_standby_names='*' -c synchronous_commit=on {options}"
    standby: PrivatePostgres | None = None
    try:
        primary.start()
        standby = PrivatePostgres(standby_of=primary)
        standby.options = f" {options}"
        standby.start()
        asyncio.run(_until_synchronous(primary))
        yield primary, standby
    finally:
        if standby is not None:
            standby.destroy()
        primary.destroy()


async def _until_synchronous(primary: PrivatePostgres) -> None:
    conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{primary.port}/postgres")
    try:
        query = "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
        deadline = time.monotonic() + 30
        while await conn.fetchval(query) == 0:
            if time.monotonic() > deadline:
                raise RuntimeError("the standby never became synchronous")
            await asyncio.sleep(0.05)
    finally:
        await conn.close()


# --- the fold check -------------------------------------------------------------------------


class Checked(msgspec.Struct, frozen=True):
    """What the fold check saw: each response's status and end reason."""

    status: dict[str, str]
    reason: dict[str, str | None]


def fold_check(database_url: str) -> Checked:
    return asyncio.run(_fold_check(database_url))


async def _fold_check(database_url: str) -> Checked:
    """Every response is terminal, its log replays (dense positions, legal transitions, one
    terminal event last), the read model's snapshot equals the fold, and no lease is held."""
    store = await open_store(database_url, listen=False)
    status: dict[str, str] = {}
    reason: dict[str, str | None] = {}
    try:
        async with store.engine.connect() as conn:
            rows = (await conn.execute(sa.select(t_responses))).all()
        for row in rows:
            events = await store.read_events(row.id)
            state = replay(events)
            assert state.status in TERMINAL_STATUSES, f"{row.id} is stuck {state.status}"
            assert (row.status, row.version) == (state.status, state.version), row.id
            snapshot = msgspec.json.decode(row.snapshot, type=ResponseObject)
            assert snapshot == project(state), f"{row.id}: read model differs from the fold"
            assert (row.lease_owner, row.lease_expires_at) == (None, None), row.id
            facts = getattr(events[-1], "facts", None)
            status[row.id] = row.status
            reason[row.id] = facts.reason if isinstance(facts, EndFacts) else None
    finally:
        await store.close()
    return Checked(status=status, reason=reason)


# --- PgBouncer in front of a private cluster ------------------------------------------------

PGBOUNCER = "/usr/sbin/pgbouncer"


class PrivatePgBouncer:
    """PgBouncer on a free port in front of `backend` (trust auth, everything in a directory
    of its own), in `pool_mode` (`transaction` by default: what breaks prepared statements
    and LISTEN). Run as the `postgres` user when the tests run as root (PgBouncer refuses
    root). `pool_size` server connections per database and user: few, so that clients
    share them as they would in production."""

    def __init__(
        self, backend: PrivatePostgres, *, pool_mode: str = "transaction", pool_size: int = 4
    ) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="resplog-pgbouncer-"))
        self.port = free_port()
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        (self.root / "users.txt").write_text('"postgres" ""\n')
        (self.root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={backend.port}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\n"
            f"unix_socket_dir = {self.root}\n"
            f"auth_type = trust\nauth_file = {self.root / 'users.txt'}\n"
            f"pool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\n"
            "max_client_conn = 500\n"
            f"logfile = {self.root / 'pgbouncer.log'}\npidfile = {self.root / 'pgbouncer.pid'}\n"
        )
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def dsn(self, database: str = "postgres") -> str:
        """The URL as asyncpg and libpq take it."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        command = [PGBOUNCER, str(self.root / "pgbouncer.ini")]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                asyncio.run(_answers(self.port))
                return
            except (OSError, asyncpg.PostgresError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not start: {self.log_text()}") from None
                time.sleep(0.05)

    def log_text(self) -> str:
        path = self.root / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def destroy(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


async def _answers(port: int) -> None:
    conn = await asyncpg.connect(
        f"postgresql://postgres@127.0.0.1:{port}/postgres", statement_cache_size=0, timeout=2
    )
    await conn.close()


@contextmanager
def pgbouncer_in_front(
    backend: PrivatePostgres, *, pool_mode: str = "transaction", pool_size: int = 4
) -> Iterator[PrivatePgBouncer]:
    """Started in front of `backend`; stopped and removed afterwards."""
    bouncer = PrivatePgBouncer(backend, pool_mode=pool_mode, pool_size=pool_size)
    try:
        bouncer.start()
        yield bouncer
    finally:
        bouncer.destroy()
