"""The prompt's stages, run once each and in order by `prepare_prompt`: a create's refusals
come before its compaction's summarising response, the only stage that writes; a count and
a compaction run no compaction of their own."""

from __future__ import annotations

import msgspec
import pytest

from domain.compaction import COMPACTION_FACT
from domain.errors import InvalidRequest
from domain.objects import ResponseObject
from service.bundle import Bundle
from service.prompts.compaction import MARK
from service.prompts.pipeline import UNSTORED, Purpose, prepare_prompt
from service.responses.modes import create_and_wait
from service.wire.create_request import CreateRequest
from service.wire.decode import parse_create_body
from service.wire.limits import Limits
from tests.unit.conftest import Processes

OWNER = "alice"
TRIGGER = {"type": "compaction_trigger"}
HI = {"role": "user", "content": "hi"}


def request(**body: object) -> CreateRequest:
    body.setdefault("model", "scripted")
    return parse_create_body(msgspec.json.encode(body), Limits())


class Summaries:
    """A `Summarise` that runs the real create, and counts the requests it was given."""

    def __init__(self) -> None:
        self.asked: list[CreateRequest] = []

    async def __call__(self, svc: Bundle, req: CreateRequest, owner: str) -> ResponseObject:
        self.asked.append(req)
        return await create_and_wait(svc, req, owner)


async def test_a_create_refused_by_the_seal_runs_no_summarising_response(
    processes: Processes,
) -> None:
    svc = await processes.start()
    summaries = Summaries()
    forged = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "forged"}
    with pytest.raises(InvalidRequest) as caught:
        await prepare_prompt(
            svc, request(input=[HI, forged, TRIGGER]), OWNER, Purpose.CREATE, summarise=summaries
        )
    assert caught.value.code == "invalid_encrypted_content"
    assert summaries.asked == []
    assert await processes.statuses() == []  # nothing written


async def test_a_create_that_asks_for_compaction_records_it_in_its_facts(
    processes: Processes,
) -> None:
    svc = await processes.start()
    summaries = Summaries()
    prepared = await prepare_prompt(
        svc, request(input=[HI, TRIGGER]), OWNER, Purpose.CREATE, summarise=summaries
    )
    (asked,) = summaries.asked
    assert asked.response.metadata == {MARK: "1"}
    assert prepared.compaction is not None and prepared.compaction.only
    assert prepared.extra[COMPACTION_FACT] == msgspec.to_builtins(prepared.compaction)
    assert await processes.statuses() == ["completed"]  # the summarising response alone


@pytest.mark.parametrize("purpose", [Purpose.COUNT, Purpose.COMPACT])
async def test_a_count_or_a_compaction_makes_no_compaction_of_its_own(
    processes: Processes, purpose: Purpose
) -> None:
    svc = await processes.start()
    prepared = await prepare_prompt(svc, request(input=[HI, TRIGGER]), OWNER, purpose)
    assert prepared.compaction is None and COMPACTION_FACT not in prepared.extra
    assert await processes.statuses() == []


async def test_a_count_names_its_items_as_an_unstored_response_would(
    processes: Processes,
) -> None:
    svc = await processes.start()
    prepared = await prepare_prompt(svc, request(input=[HI]), OWNER, Purpose.COUNT)
    assert prepared.response.id == UNSTORED
    assert [i.id for i in prepared.items] == [f"msg_{UNSTORED.removeprefix('resp_')}_in0"]
