"""Background work across processes, at the service level: where a background response
runs, claiming queued work, cancels delivered to the lease owner, renewal, the sweeper and
shutdown. Several processes are several `Services` over one in-memory store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec
import pytest

from adapters.engines.scripted import ScriptedEngine
from domain.events import ResponseCancelled, ResponseFailed
from domain.reasons import CancelReason, FailReason
from service import responses as uc
from service.background import Background
from service.ports import Claim
from service.sweeper import Sweeper
from service.worker import Worker
from tests.fakes.memory import MemoryLeases, MemoryStore
from tests.integration import streams
from tests.unit.test_service import OWNER, make_services, request


def slow() -> ScriptedEngine:
    return ScriptedEngine(delay_s=0.01, tokens=10_000)


def end_reason(store: MemoryStore, rid: str) -> tuple[str, str | None]:
    stored = store.events[rid][-1]
    last = stored.event()
    assert isinstance(last, ResponseCancelled | ResponseFailed) and last.facts is not None
    return stored.type, last.facts.reason


async def until(predicate: Callable[[], bool], within: float = 5.0) -> None:
    """Wait for something another task does (polled: it has no event of its own)."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def test_a_background_response_runs_where_it_was_created_when_a_slot_is_free() -> None:
    svc, store = make_services()
    started = await uc.create_response(svc, request(input="x", background=True), OWNER)
    assert started.generation is not None
    assert store.leases[started.response.id][0] == "proc-a"
    final = uc.project(await started.generation.wait())
    assert final.status == "completed"
    assert started.response.id not in store.leases  # released by the terminal event


async def test_without_a_free_slot_it_waits_in_the_queue_for_any_worker() -> None:
    api, store = make_services(slots=0)
    started = await uc.create_response(api, request(input="x", background=True), OWNER)
    assert started.generation is None
    assert store.rows[started.response.id].status == "queued"
    assert isinstance(api.leases, MemoryLeases) and api.leases.work_rung == 1
    gpu, _ = make_services(store=store, owner="proc-b")
    assert await Worker(gpu).claim_once() == 1
    gen = gpu.runner.get(started.response.id)
    assert gen is not None
    assert uc.project(await gen.wait()).status == "completed"


async def test_a_worker_claims_no_more_than_its_free_slots() -> None:
    api, store = make_services(slots=0)
    for _ in range(3):
        await uc.create_response(api, request(input="x", background=True), OWNER)
    gpu, _ = make_services(slow(), store=store, owner="proc-b", slots=2)
    assert await Worker(gpu).claim_once() == 2
    assert await Worker(gpu).claim_once() == 0
    assert sorted(r.status for r in store.rows.values()) == ["in_progress", "in_progress", "queued"]
    await gpu.runner.shutdown(0)


async def test_a_cancel_on_one_process_stops_the_generation_running_in_another() -> None:
    api, store = make_services(slots=0)
    engine = slow()
    gpu, _ = make_services(engine, store=store, owner="proc-b")
    background = Background(gpu, lease_ttl=15.0)
    await background.start()
    started = await uc.create_response(api, request(input="x", background=True), OWNER)
    rid = started.response.id
    await until(lambda: gpu.runner.get(rid) is not None)
    final = await uc.cancel_response(api, rid, OWNER)
    assert final.status == "cancelled"
    assert engine.aborted == [rid]
    assert end_reason(store, rid) == ("response.cancelled", "cancelled_by_user")
    await background.drain(0)


async def test_a_queued_response_that_nobody_runs_is_cancelled_by_the_canceller() -> None:
    api, store = make_services(slots=0)
    started = await uc.create_response(api, request(input="x", background=True), OWNER)
    final = await uc.cancel_response(api, started.response.id, OWNER)
    assert final.status == "cancelled"
    assert end_reason(store, final.id) == ("response.cancelled", "cancelled_by_user")
    gpu, _ = make_services(store=store, owner="proc-b")
    assert await Worker(gpu).claim_once() == 0


async def test_a_cancel_that_outwaits_its_owner_answers_with_the_response_as_it_is() -> None:
    """The owner never hears (its doorbell is lost, it renews no more): the cancel gives up
    after `cancel_wait_s`, and the flag stays for the owner's renewal or the sweeper."""
    api, store = make_services(slots=0)
    api = msgspec.structs.replace(api, cancel_wait_s=0.1)
    gpu, _ = make_services(slow(), store=store, owner="proc-b")
    started = await uc.create_response(api, request(input="x", background=True), OWNER)
    await Worker(gpu).claim_once()
    shown = await uc.cancel_response(api, started.response.id, OWNER)
    assert shown.status == "in_progress"
    assert store.rows[started.response.id].cancel_requested
    await gpu.runner.shutdown(0)


async def test_a_renewal_pass_delivers_a_cancel_whose_doorbell_was_lost() -> None:
    svc, store = make_services(slow())
    started = await uc.create_response(svc, request(input="x", background=True), OWNER)
    rid = started.response.id
    flagged = {"cancel_requested_at": 1.0, "cancel_reason": CancelReason.CANCELLED_BY_USER}
    store.rows[rid] = msgspec.structs.replace(store.rows[rid], **flagged)  # no doorbell
    await svc.keeper.renew_once()
    assert started.generation is not None
    assert uc.project(await started.generation.wait()).status == "cancelled"
    assert end_reason(store, rid) == ("response.cancelled", "cancelled_by_user")


async def test_a_renewal_pass_stops_a_generation_whose_lease_was_taken_over() -> None:
    engine = slow()
    svc, store = make_services(engine)
    started = await uc.create_response(svc, request(input="x", background=True), OWNER)
    rid = started.response.id
    await asyncio.sleep(0.03)
    store.leases[rid] = ("proc-b", store.leases[rid][1])
    await svc.keeper.renew_once()
    assert started.generation is not None
    await started.generation.wait()
    assert engine.aborted == [rid]
    assert svc.runner.get(rid) is None


async def test_renewal_extends_every_lease_of_the_process_in_one_pass() -> None:
    svc, store = make_services(slow())
    ids = [
        (
            await uc.create_response(svc, request(input="x", background=background), OWNER)
        ).response.id
        for background in (True, False, True)
    ]
    before = {rid: store.leases[rid][1] for rid in ids}
    await asyncio.sleep(0.01)
    await svc.keeper.renew_once()
    assert all(store.leases[rid][1] > before[rid] for rid in ids)
    await svc.runner.shutdown(0)


async def test_a_cancel_rung_before_its_claim_was_launched_is_honoured() -> None:
    api, store = make_services(slots=0)
    started = await uc.create_response(api, request(input="x", background=True), OWNER)
    rid = started.response.id
    gpu, _ = make_services(slow(), store=store, owner="proc-b")
    gpu.keeper.on_cancel([(rid, "cancelled_by_user")])  # the doorbell beat the launch
    await Worker(gpu).claim_once()
    await until(lambda: store.rows[rid].status == "cancelled")


async def test_a_claim_that_was_cancelled_before_it_is_ended_not_generated() -> None:
    api, store = make_services(slots=0)
    started = await uc.create_response(api, request(input="x", background=True), OWNER)
    rid = started.response.id
    await store.request_cancel(rid)
    engine = slow()
    gpu, _ = make_services(engine, store=store, owner="proc-b")
    await Worker(gpu).claim_once()
    await until(lambda: store.rows[rid].status == "cancelled")
    assert not [e for e in store.events[rid] if e.type.endswith(".delta")]


async def lost_response(store: MemoryStore) -> str:
    """A response in progress whose process died (kill -9: nothing more was written) and
    whose lease has expired."""
    store.creator = "dead"
    decision = streams.created(owner=OWNER)
    rid = decision.events[0].response.id  # type: ignore[attr-defined]
    await store.append(rid, -1, decision.events)
    store.creator = "proc-a"
    store.leases[rid] = ("dead", 0.0)
    return str(rid)


async def test_the_sweeper_ends_a_response_whose_owner_is_gone_as_worker_lost() -> None:
    store = MemoryStore()
    rid = await lost_response(store)
    alive, _ = make_services(store=store, owner="proc-b")
    sweeper = Sweeper(alive, every=1.0)
    assert await sweeper.sweep_once() == 1
    assert end_reason(store, rid) == ("response.failed", FailReason.WORKER_LOST)
    assert store.rows[rid].status == "failed"
    assert rid not in store.leases
    assert await sweeper.sweep_once() == 0


async def test_the_sweeper_leaves_the_generations_of_its_own_process_alone() -> None:
    svc, store = make_services(slow())
    started = await uc.create_response(svc, request(input="x", background=True), OWNER)
    await until(lambda: store.rows[started.response.id].status == "in_progress")
    store.leases[started.response.id] = ("proc-a", 0.0)  # renewal late (an outage)
    assert await Sweeper(svc, every=1.0).sweep_once() == 0
    assert store.rows[started.response.id].status == "in_progress"
    await svc.runner.shutdown(0)


async def test_the_sweeper_ends_a_lost_response_cancelled_if_a_cancel_was_requested() -> None:
    store = MemoryStore()
    rid = await lost_response(store)
    await store.request_cancel(rid)
    alive, _ = make_services(store=store, owner="proc-b")
    assert await Sweeper(alive, every=1.0).sweep_once() == 1
    assert end_reason(store, rid) == ("response.cancelled", "cancelled_by_user")


async def test_shutdown_stops_claiming_and_ends_running_generations_as_failed() -> None:
    svc, store = make_services(slow())
    background = Background(svc, lease_ttl=15.0)
    await background.start()
    started = await uc.create_response(svc, request(input="x", background=True), OWNER)
    await background.drain(0.05)
    assert svc.keeper.free() == 0
    assert end_reason(store, started.response.id) == ("response.failed", "server_shutdown")
    assert started.response.id not in store.leases


async def test_a_claimed_response_whose_conversation_is_gone_fails_clearly() -> None:
    api, store = make_services(slots=0)
    first = await uc.create_response(api, request(input="one"), OWNER)
    assert first.generation is not None
    await first.generation.wait()
    second = await uc.create_response(
        api, request(input="two", background=True, previous_response_id=first.response.id), OWNER
    )
    await store.mark_deleted(first.response.id)
    gpu, _ = make_services(store=store, owner="proc-b")
    await Worker(gpu).claim_once()
    assert end_reason(store, second.response.id) == ("response.failed", "prompt_unavailable")


@pytest.mark.parametrize("reason", ["cancelled_by_user", "deleted"])
async def test_launch_cancels_at_once_a_claim_that_carries_a_cancel(reason: str) -> None:
    api, store = make_services(slots=0)
    started = await uc.create_response(api, request(input="x", background=True), OWNER)
    gpu, _ = make_services(slow(), store=store, owner="proc-b")
    claim = await gpu.leases.acquire(started.response.id)
    assert claim is not None
    gen = gpu.keeper.launch(Claim(claim.response_id, reason), started.state, _prompt(started))
    await gen.wait()
    assert end_reason(store, started.response.id) == ("response.cancelled", reason)


def _prompt(started: uc.Started) -> uc.Prompt:
    state = started.state
    assert state.response is not None and state.facts is not None
    return uc.build_prompt(state.response, state.facts.input, [])


async def test_a_generation_launched_just_before_a_shutdown_still_records_its_end() -> None:
    svc, store = make_services(slow())
    started = await uc.create_response(svc, request(input="x"), OWNER)  # not yet stepped
    await svc.runner.shutdown(0)
    assert end_reason(store, started.response.id) == ("response.failed", "server_shutdown")


async def test_a_generation_launched_while_shutting_down_is_ended_too() -> None:
    svc, store = make_services(slow())
    first = await uc.create_response(svc, request(input="x"), OWNER)
    shutdown = asyncio.create_task(svc.runner.shutdown(0.2))
    await asyncio.sleep(0.05)
    late = await uc.create_response(svc, request(input="y"), OWNER)
    await shutdown
    for rid in (first.response.id, late.response.id):
        assert end_reason(store, rid) == ("response.failed", "server_shutdown")
