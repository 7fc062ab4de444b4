"""The statements resplog runs on Citus (adapters/store/citus.py), checked without a
cluster: what Citus refuses in a distributed update, and the numbering of the multi-row
statements' parameters. The cluster's own tests are tests/e2e/test_citus.py (`-m citus`)."""

from __future__ import annotations

import re

import pytest

from adapters.store import citus
from adapters.store.tables import metadata

UPDATES = {
    "CLAIM_MOVED": citus.CLAIM_MOVED,
    "CLAIM_LIFECYCLE": citus.CLAIM_LIFECYCLE,
    "TAKE_QUEUED": citus.TAKE_QUEUED,
    "RENEW_ONE": citus.RENEW_ONE,
}


@pytest.mark.parametrize("name", sorted(UPDATES))
def test_no_distributed_update_holds_a_function_citus_refuses(name: str) -> None:
    """Citus refuses a volatile function in an UPDATE, and a stable one inside CASE."""
    sql = UPDATES[name]
    assert "clock_timestamp" not in sql and "random(" not in sql
    for case in re.findall(r"CASE .*? END", sql, flags=re.S):
        assert "statement_timestamp" not in case, case


@pytest.mark.parametrize("name", sorted(UPDATES))
def test_each_update_names_its_rows_by_the_distribution_column(name: str) -> None:
    assert re.search(r"\bid = (ANY\(\$\d+::text\[\]\)|\$\d+)", UPDATES[name])


@pytest.mark.parametrize("rows", [1, 3])
def test_the_multi_row_statements_number_every_parameter_once(rows: int) -> None:
    new = [int(n) for n in re.findall(r"\$(\d+)", citus.claim_new(rows))]
    assert set(new) == set(range(1, 14 * rows + 2))  # 14 a row, then the lease's lifetime
    events = [int(n) for n in re.findall(r"\$(\d+)", citus.insert_events(rows))]
    assert events == list(range(1, 7 * rows + 1))


def test_the_widest_statement_stays_within_postgresql_s_parameters() -> None:
    assert 15 * (citus.MAX_ROWS // 15) < 65535 and 7 * (citus.MAX_ROWS // 7) < 65535
    assert citus.wanted()["api_keys"] == "n" and citus.wanted()["events"] == "h"


def test_every_table_has_its_place_on_citus() -> None:
    """A table a migration adds is distributed, a reference table or named as staying on
    the coordinator (`citus.LOCAL`): else `migrate --citus` would leave it on the
    coordinator unnoticed, where a flush's join with the log's shards would cross nodes."""
    placed = citus.TABLES | set(citus.LOCAL)
    assert set(metadata.tables) - {"alembic_version"} <= placed
    assert set(metadata.tables) - set(citus.LOCAL) == citus.TABLES


def test_what_is_distributed_keeps_its_primary_key_on_its_shard() -> None:
    """Citus distributes a table only if its primary key holds the distribution column."""
    for name, column, _ in citus.DISTRIBUTED:
        key = {c.name for c in metadata.tables[name].primary_key.columns}
        assert column in key, (name, column, key)
