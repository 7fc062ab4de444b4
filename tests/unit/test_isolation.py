"""Every use-case hides another owner's response as NotFound and writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import sqlalchemy as sa

from adapters.engines.scripted import ScriptedEngine
from adapters.store.sql import SqlEventStore
from domain.errors import NotFound
from service.bundle import Bundle
from service.responses import create as uc
from service.responses import reads, stopping
from tests.unit.conftest import Processes
from tests.unit.test_service import request

UseCase = Callable[[Bundle, str, str], Awaitable[object]]

USE_CASES: dict[str, UseCase] = {
    "retrieve": reads.retrieve,
    "retrieve_raw": reads.retrieve_raw,
    "read_events": lambda svc, rid, owner: reads.read_events(svc, rid, owner, after=-1),
    "read_stored_events": lambda svc, rid, owner: reads.read_events(
        svc, rid, owner, after=-1, follow=False
    ),
    "cancel": stopping.cancel_response,
    "delete": stopping.delete_response,
    "input_items": lambda svc, rid, owner: reads.list_input_items(
        svc, rid, owner, after=None, limit=20, order="asc"
    ),
    "previous_response_id": lambda svc, rid, owner: uc.create_response(
        svc, request(input="x", previous_response_id=rid), owner
    ),
}


@pytest.mark.parametrize("name", list(USE_CASES))
@pytest.mark.parametrize("running", [False, True])
async def test_another_owner_is_told_not_found_and_nothing_changes(
    processes: Processes, name: str, running: bool
) -> None:
    svc = await processes.start(ScriptedEngine(delay_s=0.01, tokens=200 if running else 3))
    started = await uc.create_response(svc, request(input="x", background=True), "alice")
    rid = started.response.id
    assert started.generation is not None
    if not running:
        await started.generation.wait()
    else:
        await asyncio.sleep(0.05)
    before = await svc.index.get(rid)
    events = len(await svc.store.read(rid))
    with pytest.raises(NotFound):
        await USE_CASES[name](svc, rid, "bob")
    assert len(await processes.statuses()) == 1  # no response created
    row = await svc.index.get(rid)
    assert row is not None and not row.deleted and not row.cancel_requested
    if running:
        assert svc.runner.get(rid) is not None  # still generating, not cancelled
    else:
        assert row == before and len(await svc.store.read(rid)) == events
    await svc.runner.shutdown(0)


@pytest.mark.parametrize("name", list(USE_CASES))
async def test_another_owner_is_refused_before_the_snapshot_is_read(
    processes: Processes, name: str
) -> None:
    """A refusal must cost what "no such id" costs: a query that fetches a snapshot has
    the owner in its WHERE clause, so another owner's (large) snapshot is never read."""
    svc = await processes.start(ScriptedEngine(tokens=3))
    started = await uc.create_response(svc, request(input="x", background=True), "alice")
    assert started.generation is not None
    await started.generation.wait()
    assert isinstance(svc.index, SqlEventStore)
    fetched: list[tuple[str, object]] = []

    def record(*args: object) -> None:
        statement, parameters = str(args[2]), args[3]
        if "snapshot" in statement.split(" FROM ")[0]:
            fetched.append((statement, parameters))

    engine = svc.index.engine.sync_engine
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        with pytest.raises(NotFound):
            await USE_CASES[name](svc, started.response.id, "bob")
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert fetched  # the hook sees the lookup (this test is not vacuous)
    for statement, parameters in fetched:
        where = statement.split(" WHERE ", 1)[-1]
        assert "responses.owner = " in where and "bob" in str(parameters), statement
    await svc.runner.shutdown(0)
