"""Database URLs: the accepted spellings, normalised to the async drivers the store uses.

PostgreSQL may be named by several hosts, for a primary with standbys that a failover tool
promotes (docs/guides/high-availability.md). Two spellings are accepted:

- libpq's, `postgresql://user@h1:5432,h2:5432/db?target_session_attrs=read-write`, which
  `psql` and pg_auto_failover's `pg_autoctl show uri` print;
- SQLAlchemy's, `postgresql+asyncpg://user@/db?host=h1:5432&host=h2:5432&...`.

Both become SQLAlchemy's (its asyncpg dialect hands the host list to `asyncpg.connect`),
and the raw asyncpg connection of the LISTEN doorbell gets libpq's back (`asyncpg_dsn`).
asyncpg tries the hosts in order and keeps the first that `target_session_attrs` accepts;
resplog writes, so a URL of several hosts that does not say is given `read-write`.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy.engine import URL, make_url

_ASYNC_DRIVERS = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
}

TARGET = "target_session_attrs"
_DEFAULT_PORT = "5432"
# scheme://[userinfo@]host[:port],host[:port][/database][?query] (userinfo has no bare `@`:
# a password's is percent-encoded, as in any URL).
_MULTI_HOST = re.compile(
    r"^(?P<scheme>[^:/]+)://(?:(?P<user>[^@/]*)@)?(?P<hosts>[^/?@]*,[^/?@]*)(?P<rest>[/?].*)?$"
)


def _with_port(host: str) -> str:
    """libpq lets a host go without its port (5432); SQLAlchemy's list wants every one."""
    if host.endswith("]") or ":" not in host:
        return f"{host}:{_DEFAULT_PORT}"
    return host


def _hosts_as_query(url: str) -> str:
    """libpq's `h1:p1,h2:p2` host list rewritten as SQLAlchemy's `?host=h1:p1&host=h2:p2`."""
    match = _MULTI_HOST.match(url)
    if match is None:
        return url
    hosts = [_with_port(h.strip()) for h in match["hosts"].split(",") if h.strip()]
    rest = match["rest"] or "/"
    path, _, query = rest.partition("?")
    user = f"{match['user']}@" if match["user"] is not None else ""
    params = "&".join([*(f"host={h}" for h in hosts), *([query] if query else [])])
    return f"{match['scheme']}://{user}{path or '/'}?{params}"


def hosts(url: URL) -> list[str]:
    """The `host:port` list of a URL that names several hosts; empty for one host."""
    value = url.query.get("host")
    listed = [value] if isinstance(value, str) else list(value or ())
    return listed if len(listed) > 1 else []


def async_url(url: str | URL) -> URL:
    """`postgresql://` and `sqlite:///` mean the same as their `+asyncpg`/`+aiosqlite` forms;
    a libpq host list becomes SQLAlchemy's (see the module's docstring)."""
    parsed = make_url(_hosts_as_query(url) if isinstance(url, str) else url)
    driver = _ASYNC_DRIVERS.get(parsed.drivername)
    if driver is None:
        raise ValueError(
            f"unsupported database URL {parsed.render_as_string(hide_password=True)!r}: "
            "use postgresql+asyncpg://... or sqlite+aiosqlite:///path"
        )
    parsed = parsed.set(drivername=driver)
    if is_postgres(parsed) and hosts(parsed) and TARGET not in parsed.query:
        parsed = parsed.update_query_dict({TARGET: "read-write"})
    return parsed


def is_postgres(url: URL) -> bool:
    return url.get_backend_name() == "postgresql"


def asyncpg_dsn(url: URL) -> str:
    """A plain libpq-style DSN for a raw asyncpg connection (the LISTEN connection): the
    same host (or host list) and `target_session_attrs`, none of SQLAlchemy's own options."""
    listed = hosts(url)
    keep = {TARGET: url.query[TARGET]} if TARGET in url.query else {}
    if not listed:
        plain = url.set(drivername="postgresql", query=keep)
        return plain.render_as_string(hide_password=False)
    bare = url.set(drivername="postgresql", host=None, port=None, query=keep)
    scheme, rest = bare.render_as_string(hide_password=False).split("://", 1)
    # `user:password@/db?...` or `/db?...`: the host list goes where the host would be.
    user, at, path = rest.rpartition("@")
    return f"{scheme}://{user}{at}{','.join(listed)}{path}"


def ensure_sqlite_directory(url: URL) -> None:
    """SQLite creates the file but not its directory (e.g. a fresh `resplog-data/`)."""
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
