"""One row type: the `responses` table, the port's `ResponseRow`, the store's one mapping
between them, and the export line agree column for column."""

from __future__ import annotations

import re

import sqlalchemy as sa

from adapters.store import postgres, sqlite
from adapters.store.rows import INSERT_COLUMNS
from adapters.store.tables import metadata, row_of, values_of
from adapters.store.tables import responses as t_responses
from domain.reasons import CancelReason
from service.audit.archive import ResponseLine
from service.audit.records import DERIVED, FLAGS
from service.ports import ResponseRow

ROW = ResponseRow(
    id="resp_1",
    owner="o",
    status="in_progress",
    model="m",
    background=True,
    store=False,
    previous_response_id=None,
    created_at=1.5,
    updated_at=2.5,
    version=3,
    snapshot_version=1,
    snapshot=b'{"id":"resp_1"}',
    cancel_requested_at=4.5,
    cancel_reason=CancelReason.DELETED,
    lease_owner="proc-a",
    lease_expires_at=9.5,
)


def test_the_table_has_exactly_the_columns_of_the_row() -> None:
    assert tuple(t_responses.c.keys()) == ResponseRow.__struct_fields__


def test_a_row_comes_back_from_the_table_as_it_went_in() -> None:
    engine = sa.create_engine("sqlite://")
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(sa.insert(t_responses).values(**values_of(ROW)))
        back = row_of(conn.execute(sa.select(t_responses)).one())
    assert back == ROW
    assert type(back.cancel_reason) is CancelReason


def test_the_dialects_insert_the_creation_columns_in_order() -> None:
    for statement in (postgres._CLAIM_NEW, sqlite._INSERT_ROW):
        listed = re.search(r"INSERT INTO responses \(([^)]*)\)", statement)
        assert listed is not None
        names = [n.strip() for n in listed.group(1).split(",")]
        assert names[: len(INSERT_COLUMNS)] == list(INSERT_COLUMNS)
        assert set(names) <= set(ResponseRow.__struct_fields__)


def test_every_column_is_derived_from_the_log_or_carried_by_an_export() -> None:
    assert set(DERIVED) | set(FLAGS) | {"id"} == set(ResponseRow.__struct_fields__)
    assert set(FLAGS) <= set(ResponseLine.__struct_fields__)
