"""Database URLs naming several PostgreSQL hosts (a primary and its standbys): the engine,
the LISTEN connection and the migrations all reach the same hosts, asking for the
read-write one, with SQLAlchemy's options kept away from asyncpg's DSN."""

from __future__ import annotations

import pytest

from adapters.cli.common import redact
from adapters.store.urls import async_url, asyncpg_dsn, hosts

LIBPQ = "postgresql://app:s%40cret@10.0.0.1:5432,10.0.0.2:6543/resplog"
ALCHEMY = "postgresql+asyncpg://app:s%40cret@/resplog?host=10.0.0.1:5432&host=10.0.0.2:6543"


@pytest.mark.parametrize("url", [LIBPQ, ALCHEMY])
def test_both_spellings_of_a_host_list_reach_the_same_hosts(url: str) -> None:
    parsed = async_url(url)
    assert parsed.drivername == "postgresql+asyncpg"
    assert hosts(parsed) == ["10.0.0.1:5432", "10.0.0.2:6543"]
    assert parsed.database == "resplog"
    assert parsed.username == "app"
    assert parsed.password == "s@cret"
    # resplog writes: without a word from the URL it wants the read-write node.
    assert parsed.query["target_session_attrs"] == "read-write"
    assert asyncpg_dsn(parsed) == (
        "postgresql://app:s%40cret@10.0.0.1:5432,10.0.0.2:6543/resplog"
        "?target_session_attrs=read-write"
    )


def test_a_host_without_its_port_gets_libpqs_default_and_an_explicit_target_is_kept() -> None:
    parsed = async_url("postgres://db-a,db-b:5433/x?target_session_attrs=primary")
    assert hosts(parsed) == ["db-a:5432", "db-b:5433"]
    assert parsed.query["target_session_attrs"] == "primary"
    assert asyncpg_dsn(parsed) == "postgresql://db-a:5432,db-b:5433/x?target_session_attrs=primary"


def test_the_engines_arguments_for_asyncpg_are_its_host_and_port_lists() -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(async_url(LIBPQ))
    _args, kwargs = engine.dialect.create_connect_args(engine.url)
    assert kwargs["host"] == ["10.0.0.1", "10.0.0.2"]
    assert kwargs["port"] == [5432, 6543]
    assert kwargs["target_session_attrs"] == "read-write"


def test_one_host_is_unchanged_and_sqlalchemys_own_options_stay_out_of_the_dsn() -> None:
    parsed = async_url("postgresql://u@h:5432/db?prepared_statement_cache_size=0")
    assert hosts(parsed) == []
    assert "target_session_attrs" not in parsed.query
    assert asyncpg_dsn(parsed) == "postgresql://u@h:5432/db"


@pytest.mark.parametrize("url", [LIBPQ, ALCHEMY])
def test_the_password_of_a_host_list_is_redacted(url: str) -> None:
    assert "s%40cret" not in redact(url)
    assert "s%40cret" not in async_url(url).render_as_string(hide_password=True)


def test_a_host_list_that_wants_the_writable_node_asks_every_host_at_once() -> None:
    """The engine connects through `multihost.first_writable` (a dead first host would hold
    asyncpg's own ordered attempt for its whole timeout); other targets and one host keep
    asyncpg's way, with the connect arguments as they were."""
    from adapters.store.multihost import engine_arguments

    assert set(engine_arguments(async_url(LIBPQ), {"timeout": 5})) == {"async_creator"}
    anyone = async_url(LIBPQ + "?target_session_attrs=any")
    assert engine_arguments(anyone, {"timeout": 5}) == {"connect_args": {"timeout": 5}}
    assert engine_arguments(async_url("postgresql://u@h/db"), {}) == {}
