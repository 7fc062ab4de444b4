"""PostgreSQL behind a pooler that hands out a server connection per transaction
(PgBouncer's `pool_mode = transaction` or `statement`): what such a URL can and cannot do,
and how the store finds out which kind of URL it was given.

Through such a pooler two things of a session do not survive from one transaction to the
next, since the next may run on another server connection:

- named prepared statements. asyncpg prepares and caches one per statement text
  (`__asyncpg_stmt_N__`), and SQLAlchemy's asyncpg dialect prepares every statement it
  runs; a later use of the name on another server connection fails ("prepared statement
  ... does not exist"), and a second client's statement of the same name on the first's
  server connection fails too ("... already exists"). asyncpg's answer is
  `statement_cache_size=0` (its FAQ, docs/faq.rst in MagicStack/asyncpg: "disable automatic
  use of prepared statements by passing `statement_cache_size=0`"), which makes it use the
  unnamed statement, re-parsed in the same round trip as its execution; SQLAlchemy's
  dialect then needs `prepared_statement_cache_size=0` and a name of its own for the
  statements it prepares (lib/sqlalchemy/dialects/postgresql/asyncpg.py in SQLAlchemy,
  "Prepared Statement Name with PGBouncer"). resplog names them all "" (the unnamed
  statement) rather than by a fresh UUID each as that page suggests: a named statement
  stays on the server connection it was prepared on until that connection closes, one
  more per statement run, while the unnamed one is replaced by the next. With its cache
  off, asyncpg marks an unnamed statement unprepared once described, so that its
  execution parses it again in the same round trip (`Connection._get_statement` in
  asyncpg/connection.py: "assuming people are running PgBouncer"); asyncpg's FAQ
  otherwise warns off `Connection.prepare()`, which SQLAlchemy's dialect always calls.
- LISTEN: the server connection that listens goes back to the pool, and the notifications
  reach whichever client runs on it next, or none. The doorbells (listener.py) need a URL
  that keeps a session: `--session-database-url`, straight to PostgreSQL. Without one the
  tails poll.

Which kind a URL is, is found by asking it (`keeps_session`): a connection LISTENs, a
second one NOTIFYs, and the first hears it only if its session outlived its statement.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

PROBE_CHANNEL = "resplog_session_probe"
# How long a probe waits for its own notification: on a direct connection it comes back in
# a round trip; through a transaction pooler it never does, and this is what a start-up
# through one costs.
PROBE_WAIT = 1.0
# How often a live tail re-reads its stream when no doorbell can ring (no session URL).
POLL_WITHOUT_DOORBELL = 0.25


def unnamed() -> str:
    """The name SQLAlchemy's asyncpg dialect gives each statement it prepares through a
    pooler: "", PostgreSQL's unnamed statement (see the module's docstring)."""
    return ""


def pooled_connect_args() -> dict[str, Any]:
    """`connect_args` of SQLAlchemy's asyncpg dialect for a URL at a transaction pooler:
    asyncpg's statement cache off, and SQLAlchemy's own off with its statements unnamed."""
    return {
        "statement_cache_size": 0,
        "prepared_statement_cache_size": 0,
        "prepared_statement_name_func": unnamed,
    }


Connect = Callable[[], Awaitable[Any]]


async def keeps_session(connect: Connect, *, wait: float = PROBE_WAIT) -> bool:
    """Whether what `connect` connects to keeps a session between statements (PostgreSQL
    itself, or a pooler in session mode) rather than handing out a server connection per
    transaction. `connect` must make connections that prepare no named statement
    (`statement_cache_size=0`): the probe may be talking to a pooler."""
    token = secrets.token_hex(8)
    heard = asyncio.Event()

    def on_notify(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if payload == token:
            heard.set()

    listening = await connect()
    try:
        await listening.add_listener(PROBE_CHANNEL, on_notify)
        ringing = await connect()
        try:
            await ringing.execute(f"SELECT pg_notify('{PROBE_CHANNEL}', '{token}')")
        finally:
            with contextlib.suppress(Exception):
                await ringing.close(timeout=2)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(heard.wait(), wait)
        return heard.is_set()
    finally:
        with contextlib.suppress(Exception):
            await listening.close(timeout=2)


def probe_connect(dsn: str, connect_timeout: float | None) -> Connect:
    """Plain connections to `dsn` fit for a probe through a pooler."""

    async def connect() -> Any:
        return await asyncpg.connect(dsn, statement_cache_size=0, timeout=connect_timeout or 10.0)

    return connect
