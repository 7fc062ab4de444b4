"""Background work across processes, at the service level: where a background response
runs, claiming queued work, cancels delivered to the lease owner, renewal, the sweeper and
shutdown. Several processes are several bundles over one SQLite file."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from adapters.engines.scripted import ScriptedEngine
from domain.errors import StoreUnavailable
from domain.events import ResponseCancelled, ResponseFailed
from domain.fold.replay import project
from domain.generation import Prompt
from domain.reasons import FailReason
from service.bundle import Bundle
from service.ports import Claim
from service.prompts.build import build_prompt, prompt_from_facts
from service.responses import create as uc
from service.responses import stopping
from service.responses.reads import load_state
from service.work.background import Background
from service.work.sweeper import Sweeper
from service.work.worker import Worker
from tests.integration import streams
from tests.unit.conftest import Processes
from tests.unit.test_service import OWNER, request


def slow() -> ScriptedEngine:
    return ScriptedEngine(delay_s=0.01, tokens=10_000)


async def end_reason(svc: Bundle, rid: str) -> tuple[str, str | None]:
    """The stored type of the last event (a cancellation is `response.incomplete` on the
    wire), and the reason the log keeps for it."""
    stored = (await svc.store.read(rid))[-1]
    last = stored.event()
    assert isinstance(last, ResponseCancelled | ResponseFailed) and last.facts is not None
    if stored.type == "response.incomplete":
        assert isinstance(last, ResponseCancelled) and last.response.status == "cancelled"
    return stored.type, last.facts.reason


async def status_of(svc: Bundle, rid: str) -> str:
    row = await svc.index.get(rid)
    assert row is not None
    return row.status


async def until(predicate: Callable[[], Awaitable[bool]], within: float = 5.0) -> None:
    """Wait for something another task does (polled: it has no event of its own)."""
    async with asyncio.timeout(within):
        while not await predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def test_a_background_response_runs_where_it_was_created_when_a_slot_is_free(
    processes: Processes,
) -> None:
    svc = await processes.start()
    started = await uc.create_response(svc, request(input="x", background=True), OWNER)
    assert started.generation is not None
    assert (await processes.lease(started.response.id))[0] == "proc-a"
    final = project(await started.generation.wait())
    assert final.status == "completed"
    assert await processes.lease(started.response.id) == (
        None,
        None,
    )  # released by the terminal event


async def test_no_other_worker_can_claim_it_between_its_create_and_its_launch(
    processes: Processes,
) -> None:
    """The moment right after the create's commit, when another process's worker polls
    (before, the create leased its response in a statement of its own, and that worker
    could take it first: its creator's client then tailed it from another process)."""
    api = await processes.start()
    other = Worker(await processes.start(owner="proc-b"))
    claimed: list[int] = []
    create = api.writer.create

    def create_then_poll(*args: Any, **kwargs: Any) -> asyncio.Future[None]:
        committed = create(*args, **kwargs)

        async def then_poll() -> None:
            await committed
            claimed.append(await other.claim_once())

        return asyncio.ensure_future(then_poll())

    api.writer.create = create_then_poll  # type: ignore[method-assign]
    started = await uc.create_response(api, request(input="x", background=True), OWNER)
    assert claimed == [0]
    assert started.generation is not None
    assert (await processes.lease(started.response.id))[0] == "proc-a"
    assert project(await started.generation.wait()).status == "completed"


async def test_a_background_create_whose_caller_goes_away_still_runs_it_here(
    processes: Processes,
) -> None:
    """Its events were handed to the writer, so they commit, leased to this process: it
    must run here (nobody else may until that lease lapses), not wait out the lease."""
    api = await processes.start(slots=1)
    ids: list[str] = []
    create_stream = api.writer.create

    def slow_create(rid: str, *args: Any, **kwargs: Any) -> asyncio.Future[None]:
        ids.append(rid)

        async def later() -> None:
            await asyncio.sleep(0.05)  # the caller is gone before this commits
            await create_stream(rid, *args, **kwargs)

        return asyncio.ensure_future(later())

    api.writer.create = slow_create  # type: ignore[method-assign]
    create = asyncio.create_task(
        uc.create_response(api, request(input="x", background=True), OWNER)
    )
    await asyncio.sleep(0.01)
    create.cancel()
    with pytest.raises(asyncio.CancelledError):
        await create

    async def launched() -> bool:
        return bool(ids) and api.runner.get(ids[0]) is not None

    await until(launched)
    gen = api.runner.get(ids[0])
    assert gen is not None
    assert (await processes.lease(ids[0]))[0] == "proc-a"
    assert project(await gen.wait()).status == "completed"

    async def slot_free() -> bool:
        return api.keeper.free() == 1

    await until(slot_free)


@pytest.mark.parametrize("when", ["at_once", "at_commit"])
async def test_a_create_that_fails_to_commit_gives_its_slot_back(
    processes: Processes, when: str
) -> None:
    """Refused when queued (the writer knows the database is down) or at the commit."""
    api = await processes.start(slots=1)

    def unavailable(*_args: Any, **_kwargs: Any) -> asyncio.Future[None]:
        refusal = StoreUnavailable("the database cannot be reached; retry shortly")
        if when == "at_once":
            raise refusal
        failed = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(failed.set_exception, refusal)  # as a flush would
        return failed

    api.writer.create = unavailable  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailable):
        await uc.create_response(api, request(input="x", background=True), OWNER)
    assert api.keeper.free() == 1


async def test_without_a_free_slot_it_waits_in_the_queue_for_any_worker(
    processes: Processes,
) -> None:
    api = await processes.start(slots=0)
    rung: list[None] = []
    api.bells.listen(lambda: rung.append(None), lambda _: None)
    started = await uc.create_response(api, request(input="x", background=True), OWNER)
    assert started.generation is None
    assert await status_of(api, started.response.id) == "queued"
    assert len(rung) == 1  # this process's own workers are rung at once (others poll)
    gpu = await processes.start(owner="proc-b")
    assert await Worker(gpu).claim_once() == 1
    gen = gpu.runner.get(started.response.id)
    assert gen is not None
    assert project(await gen.wait()).status == "completed"


async def test_a_worker_claims_no_more_than_its_free_slots(processes: Processes) -> None:
    api = await processes.start(slots=0)
    for _ in range(3):
        await uc.create_response(api, request(input="x", background=True), OWNER)
    gpu = await processes.start(slow(), owner="proc-b", slots=2)
    assert await Worker(gpu).claim_once() == 2
    assert await Worker(gpu).claim_once() == 0

    async def two_started() -> bool:  # once their `in_progress` events are committed
        return await processes.statuses() == ["in_progress", "in_progress", "queued"]

    await until(two_started)
    await gpu.runner.shutdown(0)


async def test_a_cancel_on_one_process_stops_the_generation_running_in_another(
    processes: Processes,
) -> None:
    """On SQLite the owner hears of it at its next renewal pass (PostgreSQL rings it)."""
    api = await processes.start(slots=0)
    engine = slow()
    gpu = await processes.start(engine, owner="proc-b", lease_ttl_s=0.6)
    background = Background(gpu, lease_ttl=0.6)
    await background.start()
    started = await uc.create_response(api, request(input="x", background=True), OWNER)
    rid = started.response.id

    async def running() -> bool:
        return gpu.runner.get(rid) is not None

    await until(running)
    final = await stopping.cancel_response(api, rid, OWNER)
    assert final.status == "cancelled"
    assert engine.aborted == [rid]
    assert await end_reason(api, rid) == ("response.incomplete", "cancelled_by_user")
    await background.drain(0)


async def test_a_queued_response_that_nobody_runs_is_cancelled_by_the_canceller(
    processes: Processes,
) -> None:
    api = await processes.start(slots=0)
    started = await uc.create_response(api, request(input="x", background=True), OWNER)
    final = await stopping.cancel_response(api, started.response.id, OWNER)
    assert final.status == "cancelled"
    assert await end_reason(api, final.id) == ("response.incomplete", "cancelled_by_user")
    gpu = await processes.start(owner="proc-b")
    assert await Worker(gpu).claim_once() == 0


async def test_a_cancel_that_outwaits_its_owner_answers_with_the_response_as_it_is(
    processes: Processes,
) -> None:
    """The owner never hears (it renews no more): the cancel gives up after
    `cancel_wait_s`, and the flag stays for the owner's renewal or the sweeper."""
    api = await processes.start(slots=0, cancel_wait_s=0.1)
    gpu = await processes.start(slow(), owner="proc-b")
    started = await uc.create_response(api, request(input="x", background=True), OWNER)
    await Worker(gpu).claim_once()
    shown = await stopping.cancel_response(api, started.response.id, OWNER)
    assert shown.status == "in_progress"
    row = await api.index.get(started.response.id)
    assert row is not None and row.cancel_requested
    await gpu.runner.shutdown(0)


async def test_a_renewal_pass_delivers_a_cancel_whose_doorbell_was_lost(
    processes: Processes,
) -> None:
    svc = await processes.start(slow())
    started = await uc.create_response(svc, request(input="x", background=True), OWNER)
    rid = started.response.id
    await processes.flag_cancel(rid)
    await svc.keeper.renew_once()
    assert started.generation is not None
    assert project(await started.generation.wait()).status == "cancelled"
    assert await end_reason(svc, rid) == ("response.incomplete", "cancelled_by_user")


async def test_a_renewal_pass_stops_a_generation_whose_lease_was_taken_over(
    processes: Processes,
) -> None:
    engine = slow()
    svc = await processes.start(engine)
    started = await uc.create_response(svc, request(input="x", background=True), OWNER)
    rid = started.response.id
    await asyncio.sleep(0.03)
    await processes.set_lease(rid, "proc-b", time.time() + 15)
    await svc.keeper.renew_once()
    assert started.generation is not None
    await started.generation.wait()
    assert engine.aborted == [rid]
    assert svc.runner.get(rid) is None
    assert (await processes.lease(rid))[0] == "proc-b"  # fenced out: nothing it wrote moved it


async def test_renewal_extends_every_lease_of_the_process_in_one_pass(
    processes: Processes,
) -> None:
    svc = await processes.start(slow())
    ids = [
        (
            await uc.create_response(svc, request(input="x", background=background), OWNER)
        ).response.id
        for background in (True, False, True)
    ]
    before = {rid: (await processes.lease(rid))[1] or 0.0 for rid in ids}
    await asyncio.sleep(0.01)
    await svc.keeper.renew_once()
    after = {rid: (await processes.lease(rid))[1] or 0.0 for rid in ids}
    assert all(after[rid] > before[rid] for rid in ids)
    await svc.runner.shutdown(0)


async def test_a_cancel_rung_before_its_claim_was_launched_is_honoured(
    processes: Processes,
) -> None:
    api = await processes.start(slots=0)
    started = await uc.create_response(api, request(input="x", background=True), OWNER)
    rid = started.response.id
    gpu = await processes.start(slow(), owner="proc-b")
    gpu.keeper.on_cancel([(rid, "cancelled_by_user")])  # the doorbell beat the launch
    await Worker(gpu).claim_once()

    async def cancelled() -> bool:
        return await status_of(api, rid) == "cancelled"

    await until(cancelled)


async def test_a_claim_that_was_cancelled_before_it_is_ended_not_generated(
    processes: Processes,
) -> None:
    api = await processes.start(slots=0)
    started = await uc.create_response(api, request(input="x", background=True), OWNER)
    rid = started.response.id
    await api.index.request_cancel(rid)
    gpu = await processes.start(slow(), owner="proc-b")
    await Worker(gpu).claim_once()

    async def cancelled() -> bool:
        return await status_of(api, rid) == "cancelled"

    await until(cancelled)
    assert not [e for e in await api.store.read(rid) if e.type.endswith(".delta")]


async def lost_response(processes: Processes) -> str:
    """A response in progress whose process died (kill -9: nothing more was written) and
    whose lease has expired."""
    dead = await processes.start(owner="dead")
    decision = streams.created(owner=OWNER)
    rid = decision.events[0].response.id  # type: ignore[attr-defined]
    await dead.writer.append(rid, -1, decision.events)
    await processes.set_lease(rid, "dead", 0.0)
    return str(rid)


async def test_the_sweeper_ends_a_response_whose_owner_is_gone_as_worker_lost(
    processes: Processes,
) -> None:
    rid = await lost_response(processes)
    alive = await processes.start(owner="proc-b")
    sweeper = Sweeper(alive, every=1.0)
    assert await sweeper.sweep_once() == 1
    assert await end_reason(alive, rid) == ("response.failed", FailReason.WORKER_LOST)
    assert await status_of(alive, rid) == "failed"
    assert await processes.lease(rid) == (None, None)
    assert await sweeper.sweep_once() == 0


async def test_after_an_outage_the_sweeper_leaves_expired_leases_a_lease_to_be_renewed(
    processes: Processes,
) -> None:
    """No owner could renew while the database was away, so its leases lapsed with every
    other: a sweeper that met the outage ends none for a whole lease after it is back. The
    owner that renews meanwhile keeps its response; the one that does not is gone."""
    kept, lost = await lost_response(processes), await lost_response(processes)
    await processes.set_lease(kept, "alive", 0.0)
    alive = await processes.start(owner="alive")
    other = await processes.start(owner="proc-b")
    sweeper = Sweeper(other, every=1.0, outage_grace_s=0.5)
    expired = other.leases.expired

    async def away(limit: int) -> list[str]:
        raise StoreUnavailable("cannot use the database now (retry shortly)")

    other.leases.expired = away  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailable):
        await sweeper.sweep_once()
    other.leases.expired = expired  # type: ignore[method-assign]
    assert await sweeper.sweep_once() == 0  # back, but too soon for any owner to renew
    assert (await alive.leases.renew([kept])).held == {kept}
    assert await sweeper.sweep_once() == 0
    await asyncio.sleep(0.5)
    assert await sweeper.sweep_once() == 1
    assert await end_reason(alive, lost) == ("response.failed", FailReason.WORKER_LOST)
    assert await status_of(alive, kept) == "in_progress"


async def test_the_sweeper_leaves_the_generations_of_its_own_process_alone(
    processes: Processes,
) -> None:
    # Its engine quiet for a minute: no append extends the lease behind the test's back.
    svc = await processes.start(ScriptedEngine(delay_s=60, tokens=10))
    started = await uc.create_response(svc, request(input="x", background=True), OWNER)
    rid = started.response.id

    async def in_progress() -> bool:
        return await status_of(svc, rid) == "in_progress"

    await until(in_progress)
    await processes.set_lease(rid, "proc-a", 0.0)  # renewal late (an outage)
    sweeper = Sweeper(svc, every=1.0)
    assert rid in await svc.leases.expired(10)
    assert await sweeper.sweep_once() == 0
    assert await status_of(svc, rid) == "in_progress"
    await svc.runner.shutdown(0)


async def test_the_sweeper_ends_a_lost_response_cancelled_if_a_cancel_was_requested(
    processes: Processes,
) -> None:
    rid = await lost_response(processes)
    alive = await processes.start(owner="proc-b")
    await alive.index.request_cancel(rid)
    assert await Sweeper(alive, every=1.0).sweep_once() == 1
    assert await end_reason(alive, rid) == ("response.incomplete", "cancelled_by_user")


async def test_shutdown_stops_claiming_and_ends_running_generations_as_failed(
    processes: Processes,
) -> None:
    svc = await processes.start(slow())
    background = Background(svc, lease_ttl=15.0)
    await background.start()
    started = await uc.create_response(svc, request(input="x", background=True), OWNER)
    await background.drain(0.05)
    assert svc.keeper.free() == 0
    assert await end_reason(svc, started.response.id) == ("response.failed", "server_shutdown")
    assert await processes.lease(started.response.id) == (None, None)


async def test_a_claimed_response_whose_conversation_is_gone_fails_clearly(
    processes: Processes,
) -> None:
    api = await processes.start(slots=0)
    first = await uc.create_response(api, request(input="one"), OWNER)
    assert first.generation is not None
    await first.generation.wait()
    second = await uc.create_response(
        api, request(input="two", background=True, previous_response_id=first.response.id), OWNER
    )
    await api.index.mark_deleted(first.response.id)
    gpu = await processes.start(owner="proc-b")
    await Worker(gpu).claim_once()
    assert await end_reason(api, second.response.id) == ("response.failed", "prompt_unavailable")


@pytest.mark.parametrize("reason", ["cancelled_by_user", "deleted"])
async def test_launch_cancels_at_once_a_claim_that_carries_a_cancel(
    processes: Processes, reason: str
) -> None:
    api = await processes.start(slots=0)
    started = await uc.create_response(api, request(input="x", background=True), OWNER)
    gpu = await processes.start(slow(), owner="proc-b")
    claim = await gpu.leases.acquire(started.response.id)
    assert claim is not None
    gen = gpu.keeper.launch(Claim(claim.response_id, reason), started.state, _prompt(started))
    await gen.wait()
    assert await end_reason(api, started.response.id) == ("response.incomplete", reason)


def _prompt(started: uc.Started) -> Prompt:
    state = started.state
    assert state.response is not None and state.facts is not None
    return build_prompt(state.response, state.facts.input, [])


async def test_a_generation_launched_just_before_a_shutdown_still_records_its_end(
    processes: Processes,
) -> None:
    svc = await processes.start(slow())
    started = await uc.create_response(svc, request(input="x"), OWNER)  # not yet stepped
    await svc.runner.shutdown(0)
    assert await end_reason(svc, started.response.id) == ("response.failed", "server_shutdown")


async def test_a_generation_launched_while_shutting_down_is_ended_too(
    processes: Processes,
) -> None:
    svc = await processes.start(slow())
    first = await uc.create_response(svc, request(input="x"), OWNER)
    shutdown = asyncio.create_task(svc.runner.shutdown(0.2))
    await asyncio.sleep(0.05)
    late = await uc.create_response(svc, request(input="y"), OWNER)
    await shutdown
    for rid in (first.response.id, late.response.id):
        assert await end_reason(svc, rid) == ("response.failed", "server_shutdown")


async def test_a_response_this_process_already_runs_is_not_launched_twice(
    processes: Processes,
) -> None:
    """Its worker claimed it first, then the create's `acquire` (which a lease of the
    process's own satisfies) launches it: one generation, which completes."""
    api = await processes.start(slots=0)
    rid = (await uc.create_response(api, request(input="x", background=True), OWNER)).response.id
    gpu = await processes.start(ScriptedEngine(delay_s=0.005, tokens=40), owner="proc-b")
    assert await Worker(gpu).claim_once() == 1
    first = gpu.runner.get(rid)
    assert first is not None
    claim = await gpu.leases.acquire(rid)
    assert claim is not None  # granted again: the lease is this process's own
    state = await load_state(gpu, rid)
    assert state.response is not None and state.facts is not None
    again = gpu.keeper.launch(claim, state, prompt_from_facts(state.response, state.facts, []))
    assert again is first
    assert project(await first.wait()).status == "completed"
    assert (await status_of(gpu, rid)) == "completed"
