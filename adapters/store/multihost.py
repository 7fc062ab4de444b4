"""Connecting to the read-write node of a URL that names several PostgreSQL hosts.

asyncpg tries the hosts of such a URL one after the other within one `timeout` for them
all. Once a failover has promoted a standby, the old primary comes first in the list for
ever; if its machine is gone (a power cut, a partition: nothing answers, nothing refuses),
every new connection spends the whole timeout on it and never reaches the new primary.
libpq's `connect_timeout` counts per host, which only shortens the wait. So resplog asks
every host at once and keeps the first that `target_session_attrs` accepts: a dead or
frozen host costs nothing while a live one answers, and the others are dropped.

Only for the targets exactly one node meets (`read-write`, `primary`); any other
(`any`, `standby`, `prefer-standby`, ...) keeps asyncpg's own ordered choice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from sqlalchemy.engine import URL

from adapters.store.urls import TARGET, hosts

# Options of SQLAlchemy's asyncpg adapter that are not `asyncpg.connect` arguments.
_ADAPTER_OPTIONS = ("prepared_statement_cache_size", "prepared_statement_name_func", "host")
_RACED = frozenset({"read-write", "primary"})

Connect = Callable[[], Awaitable[Any]]


def _host_port(entry: str) -> tuple[str, int]:
    host, _, port = entry.rpartition(":")
    return host.strip("[]"), int(port)


def racing_connect(url: URL, connect_args: dict[str, Any]) -> Connect | None:
    """An `async_creator` for the engine (and the LISTEN connection) when `url` names
    several hosts and wants the one writable node; None otherwise (asyncpg's own way)."""
    listed = hosts(url)
    target = str(url.query.get(TARGET, "any"))
    if not listed or target not in _RACED:
        return None
    options: dict[str, Any] = {
        k: v for k, v in url.query.items() if k not in _ADAPTER_OPTIONS and isinstance(v, str)
    }
    options.update(user=url.username, password=url.password, database=url.database)
    options.update(connect_args)
    addresses = [_host_port(entry) for entry in listed]

    async def connect() -> Any:
        return await first_writable(addresses, options)

    return connect


async def first_writable(addresses: list[tuple[str, int]], options: dict[str, Any]) -> Any:
    """Connect to every address at once; the first connection `target_session_attrs`
    accepts (each attempt has the whole `timeout`), the others closed. If none is, the
    error of the last attempt to fail."""
    attempts = [
        asyncio.ensure_future(asyncpg.connect(host=host, port=port, **options))
        for host, port in addresses
    ]
    chosen: Any = None
    error: BaseException | None = None
    try:
        for attempt in asyncio.as_completed(attempts):
            try:
                chosen = await attempt
                return chosen
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                error = exc
            except asyncpg.TargetServerAttributeNotMatched as exc:  # a standby
                error = exc
        assert error is not None
        raise error
    finally:
        for attempt in attempts:
            _discard(attempt, chosen)


def _discard(attempt: asyncio.Future[Any], chosen: Any) -> None:
    """Cancel an attempt still running; close a connection that was not chosen."""
    if not attempt.done():
        attempt.cancel()
        return
    if attempt.cancelled() or attempt.exception() is not None:
        return
    connection = attempt.result()
    if connection is not chosen:
        with contextlib.suppress(Exception):
            connection.terminate()


def engine_arguments(url: URL, connect_args: dict[str, Any]) -> dict[str, Any]:
    """`create_async_engine` keywords that connect as above where it applies (the connect
    arguments then go to each attempt), else the connect arguments as they are."""
    creator = racing_connect(url, connect_args)
    if creator is not None:
        return {"async_creator": creator}
    return {"connect_args": connect_args} if connect_args else {}
