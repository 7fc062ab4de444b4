"""A private Citus cluster for the `citus` tests and bench: a coordinator and workers, each a
`PrivatePostgres` with `shared_preload_libraries = 'citus'`, on loopback.

The extension is PostgreSQL's to load, so it must be in the server's library directory:
`.ci/run` builds it from the Citus source tarball beside the checkout where it is not
(`why_not` says what is missing).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.e2e.cluster import PG_BIN, PrivatePostgres

_OPTIONS = (
    " -c shared_preload_libraries=citus -c max_prepared_transactions=200"
    " -c wal_level=logical -c max_connections=300 -c max_worker_processes=64"
)  # a maintenance daemon a database, and the rebalancer's background tasks: many workers


def _libdir() -> Path:
    """The server's library directory (Debian's layout: beside its `bin`)."""
    return PG_BIN.parent / "lib"


def why_not() -> str | None:
    """Why a Citus cluster cannot start here (None: it can)."""
    if not PG_BIN.is_dir():
        return f"no PostgreSQL server binaries at {PG_BIN}"
    if not (_libdir() / "citus.so").exists():
        return (
            f"the Citus extension is not installed ({_libdir()}/citus.so); `.ci/run` builds it "
            "from the Citus source beside the checkout, where there is one"
        )
    return None


class CitusCluster:
    """A coordinator and `workers` workers, started, with one database `name` made on all
    of them (`new_database` makes more)."""

    def __init__(self, workers: int = 2) -> None:
        self.coordinator = self._node()
        self.workers: list[PrivatePostgres] = []
        try:
            for _ in range(workers):
                self.workers.append(self._node())
        except BaseException:
            self.destroy()
            raise

    def _node(self) -> PrivatePostgres:
        node = PrivatePostgres()
        node.options = _OPTIONS
        node.start()
        return node

    def psql(self, node: PrivatePostgres, sql: str, database: str = "postgres") -> str:
        command = [str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(node.port), "-U"]
        command += ["postgres", "-d", database, "-v", "ON_ERROR_STOP=1", "-Atc", sql]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"psql on {node.port}: {done.stderr.strip()}")
        return done.stdout.strip()

    def new_database(self, name: str, shards: int = 4) -> str:
        """A database `name` with the extension on every node, the workers added to its
        coordinator, tables distributed in `shards` shards (Citus's default is 32: each is
        a table on a worker, which a test's DDL and rebalance pay for); its URL on the
        coordinator."""
        for node in (self.coordinator, *self.workers):
            self.psql(node, f"CREATE DATABASE {name}")
            self.psql(node, "CREATE EXTENSION citus", name)
        self.psql(self.coordinator, f"ALTER DATABASE {name} SET citus.shard_count = {shards}")
        self.psql(
            self.coordinator,
            f"SELECT citus_set_coordinator_host('127.0.0.1', {self.coordinator.port})",
            name,
        )
        for worker in self.workers:
            self.add_node(name, worker)
        return self.coordinator.url(name)

    def add_node(self, database: str, worker: PrivatePostgres) -> None:
        self.psql(self.coordinator, f"SELECT citus_add_node('127.0.0.1', {worker.port})", database)

    def add_worker(self, database: str) -> PrivatePostgres:
        """A new worker, with `database` and the extension, added to its coordinator."""
        worker = self._node()
        self.workers.append(worker)
        self.psql(worker, f"CREATE DATABASE {database}")
        self.psql(worker, "CREATE EXTENSION citus", database)
        self.add_node(database, worker)
        return worker

    def destroy(self) -> None:
        """Every node, whatever one of them raises (a stop that timed out)."""
        failed: BaseException | None = None
        for node in (*self.workers, self.coordinator):
            try:
                node.destroy()
            except Exception as exc:  # the others are still removed
                failed = failed or exc
        if failed is not None:
            raise failed


@contextmanager
def citus_cluster(workers: int = 2) -> Iterator[CitusCluster]:
    cluster = CitusCluster(workers)
    try:
        yield cluster
    finally:
        cluster.destroy()
