"""A process's cache of `previous_response_id` histories (service/prompts/chains.py): a
create that continues a chain this process read reads only the previous response, and the
history it builds is the one a walk of the log rebuilds; a delete or an erasure in any
process ends the chain for every process, as the walk would."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest

from domain.errors import InvalidRequest, NotFound
from domain.fold.replay import project
from domain.generation import History, Turn
from domain.objects import FunctionCall, ResponseObject
from service.audit.erasing import erase
from service.bundle import Bundle
from service.ports import GcRule
from service.prompts.chains import ChainCache
from service.prompts.history import MAX_CHAIN, load_history
from service.responses import create as uc
from service.responses import stopping
from service.wire.create_request import CreateRequest
from service.wire.decode import parse_create_body
from service.wire.limits import Limits
from tests.unit.conftest import Processes

OWNER = "alice"
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


def request(**body: object) -> CreateRequest:
    body.setdefault("model", "scripted")
    return parse_create_body(msgspec.json.encode(body), Limits())


async def run_to_end(svc: Bundle, **body: object) -> ResponseObject:
    started = await uc.create_response(svc, request(**body), OWNER)
    assert started.generation is not None
    return project(await started.generation.wait())


class Walks:
    """Counts the chain walks a bundle's read model is asked for."""

    def __init__(self, svc: Bundle) -> None:
        self.count = 0
        index: Any = svc.index
        walk = index.chain

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return await walk(*args, **kwargs)

        index.chain = counted


async def a_chain(svc: Bundle, turns: int) -> list[ResponseObject]:
    """A chain of varied turns: plain text, a tool call and its output, instructions."""
    made: list[ResponseObject] = []
    previous: str | None = None
    for k in range(turns):
        body: dict[str, Any] = {"input": f"turn {k}"}
        if k % 3 == 1:
            body = {"input": f"weather in city {k}", "tools": TOOLS}
        elif k % 3 == 2:
            call = made[-1].output[-1]
            assert isinstance(call, FunctionCall)
            output = {"type": "function_call_output", "call_id": call.call_id, "output": "sun"}
            body = {"input": [output], "tools": TOOLS, "instructions": f"be brief {k}"}
        if previous is not None:
            body["previous_response_id"] = previous
        final = await run_to_end(svc, **body)
        assert final.status == "completed", final.error
        made.append(final)
        previous = final.id
    return made


async def test_a_chain_continued_here_is_read_one_response_a_create(
    processes: Processes,
) -> None:
    svc = await processes.start()
    walks = Walks(svc)
    made = await a_chain(svc, 9)
    # No continuation walks: the first continues a response that continues nothing, and
    # each later one finds the history before its previous response here.
    assert walks.count == 0
    cached = await load_history(svc, made[-1].id, OWNER)
    assert isinstance(cached, History) and walks.count == 0
    # Another process, its cache empty, walks the log: the same turns.
    other = await processes.start(owner="proc-b")
    walked = await load_history(other, made[-1].id, OWNER)
    assert list(cached) == list(walked) and len(walked) == 9
    assert [t.response_id for t in cached] == [r.id for r in made]
    assert [t.output for t in cached] == [r.output for r in made]


async def test_a_delete_in_another_process_ends_the_chain_here(processes: Processes) -> None:
    svc = await processes.start()
    other = await processes.start(owner="proc-b")
    made = await a_chain(svc, 4)
    await load_history(svc, made[-1].id, OWNER)  # cached here
    await stopping.delete_response(other, made[1].id, OWNER)
    with pytest.raises(NotFound) as info:
        await load_history(svc, made[-1].id, OWNER)
    assert info.value.code == "previous_response_not_found"
    with pytest.raises(NotFound):
        await uc.create_response(svc, request(input="x", previous_response_id=made[-1].id), OWNER)
    # The chain up to before the deleted turn is still continued.
    assert len(await load_history(svc, made[0].id, OWNER)) == 1


async def test_an_erasure_ends_the_chain_in_every_process(processes: Processes) -> None:
    svc = await processes.start()
    made = await a_chain(svc, 3)
    await load_history(svc, made[-1].id, OWNER)
    await erase(svc.audit, [made[0].id], "asked to")
    with pytest.raises(InvalidRequest) as info:
        await load_history(svc, made[-1].id, OWNER)
    assert info.value.code == "previous_response_erased"


async def test_a_response_collected_by_its_age_ends_the_chain_here(processes: Processes) -> None:
    svc = await processes.start()
    made = await a_chain(svc, 3)
    await load_history(svc, made[-1].id, OWNER)
    # Retention: the first turn is older than the cutoff and goes (its row and its log).
    rule = GcRule(unstored=False, cutoff=time.time() + 60)
    gone, _ = await svc.audit.collector.collect(rule, [made[0].id])
    assert gone == 1
    with pytest.raises(NotFound):
        await load_history(svc, made[-1].id, OWNER)


async def test_a_break_elsewhere_walks_once_and_keeps_the_same_history(
    processes: Processes,
) -> None:
    svc = await processes.start()
    made = await a_chain(svc, 5)
    before = await load_history(svc, made[-1].id, OWNER)
    unrelated = await run_to_end(svc, input="alone")
    await stopping.delete_response(svc, unrelated.id, OWNER)
    walks = Walks(svc)
    after = await load_history(svc, made[-1].id, OWNER)
    assert walks.count == 1 and after == before
    nxt = await run_to_end(svc, input="on", previous_response_id=made[-1].id)
    assert walks.count == 1  # cached again under the new count
    assert [t.response_id for t in await load_history(svc, nxt.id, OWNER)] == [
        *(r.id for r in made),
        nxt.id,
    ]


async def test_the_cache_keeps_the_chain_limit(processes: Processes) -> None:
    svc = await processes.start()
    made = await a_chain(svc, 2)
    # Another process holds a history as long as the limit, ending with the first turn:
    # one more turn is refused, as the walk refuses it.
    other = await processes.start(owner="proc-b")
    tip = await other.index.chain_tip(made[0].id, OWNER)
    assert tip.link is not None and tip.breaks is not None
    turn = (await load_history(svc, made[0].id, OWNER))[-1]
    other.chains.put(OWNER, made[0].id, tip.breaks, History([turn] * (MAX_CHAIN - 1), turn))
    with pytest.raises(InvalidRequest) as info:
        await load_history(other, made[-1].id, OWNER)
    assert info.value.code == "invalid_value"
    assert len(await load_history(svc, made[-1].id, OWNER)) == 2


def test_the_cache_forgets_the_least_recently_used_and_what_a_break_made_stale() -> None:
    turn = Turn(response_id="resp_a", instructions=None, input=[], output=[])
    history = History([], turn)
    cache = ChainCache(size=2)
    cache.put("o", "a", 0, history)
    cache.put("o", "b", 0, history)
    assert cache.get("o", "a", 0) is history  # now the most recent
    cache.put("o", "c", 0, history)
    assert cache.get("o", "b", 0) is None and len(cache) == 2
    assert cache.get("p", "a", 0) is None  # another owner's
    assert cache.get("o", "a", 1) is None  # a break since
    assert cache.get("o", "a", 0) is None and len(cache) == 1
