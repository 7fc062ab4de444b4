"""`resplog migrate` and `resplog serve`: the database schema and the HTTP API server."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from adapters.cli.access_flags import access_options, access_settings, announce
from adapters.cli.common import database_option, json_logs, log, main, redact
from adapters.cli.generation import generation_options, generation_settings
from adapters.cli.memory import freeze_startup_heap, return_freed_memory
from adapters.cli.store import migrate as migrate_database
from adapters.cli.store import refuse_missing_file, sqlite_file
from adapters.cli.tracing import open_tracer, otel_option, watching
from domain.errors import ResplogError
from service.settings import Settings

if TYPE_CHECKING:
    from adapters.metrics import Metrics
    from adapters.otel import OtelTracer
    from adapters.wiring import Process


@main.command()
@database_option
@click.option(
    "--lock-wait",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0.001, max=600),
    help="Seconds a step waits at a time for a lock that holds up writes while it waits, "
    "before it gives way and tries again (PostgreSQL).",
)
@click.option(
    "--citus",
    is_flag=True,
    help="Then distribute the log on this Citus coordinator (docs/scale.md); refused, with "
    "nothing changed, where the server has no Citus extension or no worker.",
)
@click.option(
    "--shard-count",
    type=click.IntRange(min=1, max=64000),
    default=None,
    help="With --citus: shards per table (default: the server's citus.shard_count, 32). A "
    "flush is a transaction per shard it touches.",
)
def migrate(database_url: str, lock_wait: float, citus: bool, shard_count: int | None) -> None:
    """Upgrade the database to the newest schema (PostgreSQL or SQLite)."""
    done = migrate_database(database_url, lock_wait=lock_wait, citus=citus, shards=shard_count)
    click.echo(f"database at head: {redact(database_url)}")
    if citus:
        click.echo(f"distributed on Citus: {', '.join(done) or 'already'}")


@main.command()
@database_option
@click.option("--host", envvar="RESPLOG_HOST", default="127.0.0.1", show_default=True)
@click.option("--port", envvar="RESPLOG_PORT", default=8000, show_default=True, type=int)
@generation_options
@click.option(
    "--max-body-bytes",
    envvar="RESPLOG_MAX_BODY_BYTES",
    default=8 * 1024 * 1024,
    show_default=True,
    type=int,
)
@click.option(
    "--reasoning-events",
    envvar="RESPLOG_REASONING_EVENTS",
    type=click.Choice(["openai", "open-responses"]),
    default="openai",
    show_default=True,
    help="How reasoning text events are named: OpenAI's response.reasoning_text.* (what "
    "the official SDKs parse) or the Open Responses schema's response.reasoning.*. "
    "Recorded in each response's log at creation.",
)
@access_options
@click.option(
    "--processes",
    envvar="RESPLOG_PROCESSES",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Serving processes sharing the port (PostgreSQL only): one per core to use.",
)
@click.option(
    "--keep-alive-s",
    envvar="RESPLOG_KEEP_ALIVE_S",
    default=75,
    show_default=True,
    type=click.IntRange(min=1),
    help="Close an HTTP connection idle between requests for this long. Keep it above "
    "the idle time of the clients and proxies in front (the OpenAI SDKs reuse a "
    "connection idle up to 5 s, load balancers commonly up to 60 s): they then close "
    "first, and never send a request on a connection the server is closing.",
)
@click.option(
    "--ws-idle-timeout-s",
    envvar="RESPLOG_WS_IDLE_TIMEOUT_S",
    default=600.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Close a WebSocket that sent no message and streamed nothing for this long (0: never).",
)
@click.option(
    "--ws-ping-interval-s",
    envvar="RESPLOG_WS_PING_INTERVAL_S",
    default=20.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Ping every WebSocket client this often (0: never).",
)
@click.option(
    "--ws-ping-timeout-s",
    envvar="RESPLOG_WS_PING_TIMEOUT_S",
    default=20.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Drop a WebSocket client that does not answer a ping within this long (0: never).",
)
@click.option(
    "--public-host",
    "public_hosts",
    envvar="RESPLOG_PUBLIC_HOSTS",
    multiple=True,
    help="A host name clients reach this server by, which /metrics and /audit answer to "
    "(besides localhost, addresses and --host); repeatable (the environment variable: "
    "names separated by spaces). Any other Host is refused (421).",
)
@click.option(
    "--ws-max-queued-bytes",
    envvar="RESPLOG_WS_MAX_QUEUED_BYTES",
    default=32 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(min=0),
    help="Bytes of response.create messages one WebSocket may hold, queued or streaming; "
    "past it a message is refused with an error event (0: no bound).",
)
@click.option(
    "--ws-max-queued-bytes-per-key",
    envvar="RESPLOG_WS_MAX_QUEUED_BYTES_PER_KEY",
    default=256 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(min=0),
    help="The same across all the WebSockets of one API key, per process (0: no bound).",
)
@click.option(
    "--checkpoint-every-s",
    envvar="RESPLOG_CHECKPOINT_EVERY_S",
    default=0.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Keep a signed checkpoint of the log in the database this often (0: never); "
    "GET /v1/audit/checkpoints/latest serves the last. Needs --signing-key.",
)
@click.option(
    "--signing-key",
    envvar="RESPLOG_SIGNING_KEY",
    metavar="KEY.pem",
    help="The Ed25519 private key the periodic checkpoints are signed with.",
)
@otel_option
def serve(database_url: str, processes: int, **options: Any) -> None:
    """Run the HTTP API server (and, unless --workers 0, generate background responses)."""
    options["reasoning_events"] = options["reasoning_events"].replace("-", "_")
    _checkpointing(options.pop("checkpoint_every_s"), options.pop("signing_key"))
    refuse_missing_file(database_url)  # never an empty database file left behind
    access = access_settings(options["host"], options)
    settings = generation_settings(database_url, **options, **access)
    return_freed_memory()
    if processes > 1:
        sys.exit(_serve_processes(settings, processes))
    with _sole_server(database_url), listen(settings.host, settings.port) as sock:
        _serve_here(settings, sock)


# `serve --checkpoint-every-s`: the period and the key, read once before serving (a bad
# key is one error line before the port is bound); the processes forked inherit it.
_CHECKPOINTS: list[tuple[float, Any]] = []


def _checkpointing(every: float, key_path: str | None) -> None:
    if every and key_path is None:
        raise click.UsageError("--checkpoint-every-s needs --signing-key")
    if every and key_path is not None:
        from adapters.cli.chain import signing_key

        _CHECKPOINTS[:] = [(every, signing_key(key_path))]


def _serve_here(settings: Settings, sock: socket.socket) -> None:
    signals: list[int] = []
    # Bound before anything is announced: a port in use is one error line, not "ready"
    # and "listening" followed by uvicorn's failure.
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(_serve(settings, sock, signals, as_json=json_logs()))
    # Stopped by a signal: now that the process drained and closed, SIGTERM takes its
    # default effect (exit by SIGTERM), as uvicorn would. Ctrl-C is an operator's ordinary
    # stop, not a failure: exit 0 after the drain, 130 (the shell's code for an interrupt)
    # when a second one cut it short; never click's "Aborted!" and 1 for a KeyboardInterrupt.
    for sig in reversed(signals):
        if sig != signal.SIGINT:
            signal.raise_signal(sig)
    if signals.count(signal.SIGINT) > 1:
        sys.exit(130)


def _serve_processes(settings: Settings, count: int) -> int:
    """`--processes N` (adapters/cli/processes.py): bind here, serve in N children."""
    from adapters.cli.processes import run_children, shared_metrics

    if settings.database_url.startswith("sqlite"):
        raise ResplogError("--processes above 1 needs PostgreSQL (SQLite has one writer)")
    sock = listen(settings.host, settings.port)
    log.info("resplog: %d serving processes on %s:%d", count, settings.host, settings.port)

    def child() -> int:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            _serve_here(settings, sock)
        except KeyboardInterrupt:
            return 0
        except ResplogError as exc:
            log.error("%s", exc)
            return 1
        return 0

    with shared_metrics() as path:
        return run_children(count, child, exited=functools.partial(_gone, path))


def _gone(shared: str, pid: int) -> None:
    """A child exited: its live gauges leave the sums of the metrics page."""
    # Imported once the children are forked, which imported prometheus-client themselves.
    from adapters.metrics import process_gone

    process_gone(shared, pid)


@contextlib.contextmanager
def _sole_server(database_url: str) -> Iterator[None]:
    """One `serve` per SQLite file: a second is refused in one line. SQLite has no doorbells
    between processes, so a second server's clients would not see the first's live events
    or reach its generations to cancel them (`resplog worker`, which only polls the queue,
    may share the file). An exclusive flock() on the database file, held while serving:
    Linux keeps flock() and the POSIX locks SQLite takes apart, and the kernel drops it
    when the process dies, however it dies. The descriptor is closed only after the store
    (closing a descriptor of the file would drop this process's POSIX locks)."""
    database = sqlite_file(database_url)
    if database is None:
        yield
        return
    import fcntl

    path = os.path.abspath(os.path.expanduser(database))
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ResplogError(
                f"another resplog serve is using the SQLite database {path!r}: SQLite "
                "serves one process (use PostgreSQL for replicas)"
            ) from None
        yield
    finally:
        os.close(fd)


def listen(host: str, port: int) -> socket.socket:
    """The listening socket on `host:port` (port 0: any free one), bound as uvicorn binds
    its own for several workers (`Config.bind_socket`: IPv6 when the host has a colon)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ResplogError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


async def _serve(
    settings: Settings, sock: socket.socket, signals: list[int], *, as_json: bool
) -> None:
    """Open the process (refused, in one line, if the database is not migrated or the
    engine does not answer), then listen; once the server stopped, drain and close."""
    import uvicorn

    from adapters.cli.protocol import BoundedHttpToolsProtocol
    from adapters.http.app import announce_ready
    from adapters.http.edge import edge
    from adapters.metrics import Metrics
    from adapters.wiring import running_process

    tracer = open_tracer(settings)
    metrics = Metrics()
    try:
        async with running_process(settings, attach=watching(tracer, metrics)) as process:
            app = await _app(settings, process, tracer, metrics)
            config = uvicorn.Config(
                edge(app, settings.send_timeout_s),
                host=settings.host,
                port=settings.port,
                log_level="warning",
                # JSON logs: uvicorn's few lines go through the root handler too.
                log_config=None if as_json else uvicorn.config.LOGGING_CONFIG,
                lifespan="on",
                http=BoundedHttpToolsProtocol,
                # Nothing reads a request's client address or scheme (no log line, no
                # URL is made from them), so uvicorn's rewriting of them from
                # `X-Forwarded-*` headers would be one more layer for every request.
                proxy_headers=False,
                # The request log (adapters/cli/requestlog.py) is the access log; uvicorn's
                # own would format a line per response for a level that drops it.
                access_log=False,
                timeout_graceful_shutdown=int(settings.shutdown_grace_s) + 5,
                timeout_keep_alive=settings.keep_alive_s,
                **_websocket_options(settings),
            )
            freeze_startup_heap()
            announce_ready(settings, process)
            log.info(
                "resplog listening on http://%s:%d (database %s)",
                settings.host,
                sock.getsockname()[1],
                redact(settings.database_url),
            )
            async with _checkpoints(process.bundle):
                server = _server(config, signals, on_exit=process.begin_shutdown)
                await server.serve(sockets=[sock])
    finally:
        if tracer is not None:  # after the drain: the generations' last spans are ended
            tracer.shutdown()


async def _app(
    settings: Settings, process: Process, tracer: OtelTracer | None, metrics: Metrics
) -> Any:
    """The API with what wraps it: traces (when configured), the audit view, the request
    log, the metrics, and outermost the check of the `Host` those pages answer to."""
    from adapters.auditview import AuditView
    from adapters.cli.requestlog import request_log
    from adapters.http.app import create_app
    from adapters.http.hosts import HostCheck

    if settings.engine == "scripted":
        log.warning("engine: scripted (a deterministic script, not a model; no GPU needed)")
    if settings.workers == 0 and settings.database_url.startswith("sqlite"):
        log.warning("--workers 0 on SQLite: background responses wait for a `resplog worker`")
    await announce(settings.access, process.bundle.keys)
    app = create_app(settings, process=process)
    if tracer is not None:
        app = tracer.asgi(app)
    audit = AuditView(process.bundle, settings.audit_view, settings.audit_key)
    measured = metrics.asgi(request_log(audit.asgi(app)), settings.metrics, settings.metrics_key)
    return HostCheck([settings.host, *settings.public_hosts]).asgi(measured)


@contextlib.asynccontextmanager
async def _checkpoints(bundle: Any) -> AsyncIterator[None]:
    """The periodic checkpoint while serving (`--checkpoint-every-s`), if asked for."""
    if not _CHECKPOINTS:
        yield
        return
    import time

    from service.audit.chain import keep_checkpointing
    from service.work.periodic import Periodic

    every, key = _CHECKPOINTS[0]

    async def step() -> None:
        await keep_checkpointing(bundle.audit.ledger, key, every, time.time)

    loop = Periodic("checkpointing the log", step, lambda: every, at_once=True)
    loop.start()
    try:
        yield
    finally:
        await loop.stop()


def _websocket_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's WebSocket protocol (the `websockets` library): keep-alive pings, and a
    frame cap above the largest create body, so that a message over `max_body_bytes` is
    answered with an error event and only a far larger one closes the socket (1009); at
    shutdown a socket drains before it closes (adapters/cli/wsprotocol.py)."""
    from adapters.cli.wsprotocol import draining_protocol

    return {
        "ws": draining_protocol(settings.shutdown_grace_s),
        "ws_max_size": 2 * settings.max_body_bytes + 64 * 1024,
        "ws_ping_interval": settings.ws_ping_interval_s or None,
        "ws_ping_timeout": settings.ws_ping_timeout_s or None,
    }


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where it is installed, as uvicorn itself would run."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _server(config: Any, signals: list[int], on_exit: Callable[[], None]) -> Any:
    """uvicorn's server, also telling the process at the first SIGTERM/SIGINT: uvicorn
    itself stops the app only after its connections closed, and those wait for the
    generations. The signals it got are kept in `signals` rather than raised again when it
    stops (as uvicorn does), which would end the process before it drained."""
    import uvicorn

    from adapters.cli.accept import Acceptor

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            # uvicorn's startup (the lifespan) with no server of its own: the sockets are
            # accepted by `Acceptor`, all that waits at once (adapters/cli/accept.py).
            await super().startup(sockets=[])
            loop = asyncio.get_running_loop()

            def protocol() -> asyncio.Protocol:
                return config.http_protocol_class(  # type: ignore[no-any-return]
                    config=config, server_state=self.server_state, app_state=self.lifespan.state
                )

            # uvicorn only closes its servers and waits for them: an `Acceptor` does both.
            acceptors = [Acceptor(loop, sock, protocol) for sock in sockets or []]
            self.servers = acceptors  # type: ignore[assignment]

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            signals.append(sig)
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            else:
                self.should_exit = True
            on_exit()

    return Server(config)
