"""Every use-case hides another owner's response as NotFound and writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from adapters.engines.scripted import ScriptedEngine
from domain.errors import NotFound
from service import responses as uc
from tests.unit.test_service import make_services, request

UseCase = Callable[[uc.Services, str, str], Awaitable[object]]

USE_CASES: dict[str, UseCase] = {
    "retrieve": uc.retrieve,
    "retrieve_raw": uc.retrieve_raw,
    "check_readable": uc.check_readable,
    "cancel": uc.cancel_response,
    "delete": uc.delete_response,
    "input_items": lambda svc, rid, owner: uc.list_input_items(
        svc, rid, owner, after=None, limit=20, order="asc"
    ),
    "previous_response_id": lambda svc, rid, owner: uc.create_response(
        svc, request(input="x", previous_response_id=rid), owner
    ),
}


@pytest.mark.parametrize("name", list(USE_CASES))
@pytest.mark.parametrize("running", [False, True])
async def test_another_owner_is_told_not_found_and_nothing_changes(
    name: str, running: bool
) -> None:
    svc, store = make_services(ScriptedEngine(delay_s=0.01, tokens=200 if running else 3))
    started = await uc.create_response(svc, request(input="x", background=True), "alice")
    rid = started.response.id
    if not running:
        await started.generation.wait()
    else:
        await asyncio.sleep(0.05)
    events, rows = len(store.events[rid]), dict(store.rows)
    with pytest.raises(NotFound):
        await USE_CASES[name](svc, rid, "bob")
    assert set(store.rows) == set(rows)  # no response created
    row = store.rows[rid]
    assert not row.deleted and not row.cancel_requested
    if running:
        assert svc.runner.get(rid) is not None  # still generating, not cancelled
    else:
        assert row == rows[rid] and len(store.events[rid]) == events
    await svc.runner.shutdown(0)
