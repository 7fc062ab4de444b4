"""Database URLs: the accepted spellings, normalised to the async drivers the store uses."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import URL, make_url

_ASYNC_DRIVERS = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
}


def async_url(url: str | URL) -> URL:
    """`postgresql://` and `sqlite:///` mean the same as their `+asyncpg`/`+aiosqlite` forms."""
    parsed = make_url(url)
    driver = _ASYNC_DRIVERS.get(parsed.drivername)
    if driver is None:
        raise ValueError(
            f"unsupported database URL {parsed.render_as_string(hide_password=True)!r}: "
            "use postgresql+asyncpg://... or sqlite+aiosqlite:///path"
        )
    return parsed.set(drivername=driver)


def is_postgres(url: URL) -> bool:
    return url.get_backend_name() == "postgresql"


def asyncpg_dsn(url: URL) -> str:
    """A plain libpq-style DSN for a raw asyncpg connection (the LISTEN connection)."""
    plain = url.set(drivername="postgresql", query={})
    return plain.render_as_string(hide_password=False)


def ensure_sqlite_directory(url: URL) -> None:
    """SQLite creates the file but not its directory (e.g. a fresh `resplog-data/`)."""
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
