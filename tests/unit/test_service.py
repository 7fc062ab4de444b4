"""The Responses use-cases over the real SQLite store and the scripted engine."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Literal

import msgspec
import pytest
from openai.types.responses import Response

from adapters.engines.scripted import ScriptedEngine
from adapters.http import sse
from adapters.store.rows import Append
from domain.errors import Conflict, EngineError, InvalidRequest, NotFound
from domain.events import ResponseCancelled, ResponseCreated, ResponseFailed
from domain.fold.replay import project, replay
from domain.generation import AnyDelta, Finished, Prompt, TextDelta, TokenUsage
from domain.objects import FunctionCall, InputMessage, OutputMessage, ResponseObject
from service.bundle import Bundle
from service.responses import create as uc
from service.responses import modes, reads, stopping
from service.wire.create_request import CreateRequest
from service.wire.decode import parse_create_body
from service.wire.limits import Limits
from tests.unit.conftest import Processes

OWNER = "alice"


def request(**body: object) -> CreateRequest:
    body.setdefault("model", "scripted")
    return parse_create_body(msgspec.json.encode(body), Limits())


async def run_to_end(svc: Bundle, **body: object) -> ResponseObject:
    started = await uc.create_response(svc, request(**body), OWNER)
    assert started.generation is not None
    return project(await started.generation.wait())


def text_of(response: ResponseObject) -> str:
    return "".join(
        part.text
        for item in response.output
        if isinstance(item, OutputMessage)
        for part in item.content
        if hasattr(part, "text")
    )


async def test_a_plain_response_completes_and_validates_as_an_openai_response(
    processes: Processes,
) -> None:
    svc = await processes.start()
    final = await run_to_end(svc, input="hello world")
    assert final.status == "completed"
    assert text_of(final) == "You said: hello world"
    Response.model_validate(msgspec.to_builtins(final))
    row = await svc.index.get(final.id)
    assert row is not None
    assert row.status == "completed" and row.owner == OWNER
    assert msgspec.json.decode(row.snapshot, type=ResponseObject) == final


async def test_the_first_event_carries_the_whole_request_and_owner(processes: Processes) -> None:
    svc = await processes.start()
    final = await run_to_end(svc, input="hi", instructions="be brief", metadata={"k": "v"})
    log = await svc.store.read(final.id)
    first = log[0].event()
    assert isinstance(first, ResponseCreated)
    assert first.facts is not None and first.facts.owner == OWNER
    assert first.response.instructions == "be brief" and first.response.metadata == {"k": "v"}
    assert isinstance(first.facts.input[0], InputMessage)
    assert b"alice" not in log[0].data


async def test_retrieve_of_a_running_response_folds_its_log(processes: Processes) -> None:
    svc = await processes.start(ScriptedEngine(delay_s=0.01, tokens=50))
    started = await uc.create_response(svc, request(input="x", background=True), OWNER)
    assert started.response.status == "queued"
    await asyncio.sleep(0.1)
    mid = await reads.retrieve(svc, started.response.id, OWNER)
    assert mid.status == "in_progress"
    final = project(await started.generation.wait())
    assert (await reads.retrieve(svc, final.id, OWNER)) == final
    assert len(text_of(final)) > len(text_of(mid))


async def test_previous_response_id_carries_earlier_inputs_and_outputs_in_order(
    processes: Processes,
) -> None:
    engine = ScriptedEngine()
    seen: list[Prompt] = []
    original = engine.generate

    def spy(prompt: Prompt) -> AsyncIterator[AnyDelta]:
        seen.append(prompt)
        return original(prompt)

    engine.generate = spy  # type: ignore[method-assign]
    svc = await processes.start(engine)
    one = await run_to_end(svc, input="first")
    two = await run_to_end(svc, input="second", previous_response_id=one.id)
    await run_to_end(svc, input="third", previous_response_id=two.id)
    history = seen[-1].history
    assert [t.response_id for t in history] == [one.id, two.id]
    assert [text_of_input(t.input) for t in history] == ["first", "second"]
    assert [t.output for t in history] == [one.output, two.output]


def text_of_input(items: list[object]) -> str:
    msg = items[0]
    assert isinstance(msg, InputMessage)
    return "".join(getattr(p, "text", "") for p in msg.content)


async def test_previous_response_of_another_owner_is_not_found(processes: Processes) -> None:
    svc = await processes.start()
    one = await run_to_end(svc, input="first")
    with pytest.raises(NotFound):
        await uc.create_response(svc, request(input="x", previous_response_id=one.id), "bob")


async def test_a_function_tool_round_trip(processes: Processes) -> None:
    svc = await processes.start()
    tools = [
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
    call_turn = await run_to_end(svc, input="Paris", tools=tools)
    call = call_turn.output[-1]
    assert isinstance(call, FunctionCall) and call.name == "get_weather"
    assert msgspec.json.decode(call.arguments) == {"city": "Paris"}
    answer = await run_to_end(
        svc,
        previous_response_id=call_turn.id,
        tools=tools,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
    )
    assert text_of(answer) == "The function returned: sunny"


async def test_max_output_tokens_cuts_the_response_to_incomplete(processes: Processes) -> None:
    svc = await processes.start(ScriptedEngine(tokens=100))
    final = await run_to_end(svc, input="x", max_output_tokens=20)
    assert final.status == "incomplete"
    assert final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.usage is not None and final.usage.output_tokens == 20


async def test_cancel_stops_the_engine_and_ends_the_log_with_the_cancellation(
    processes: Processes,
) -> None:
    engine = ScriptedEngine(delay_s=0.01, tokens=1000)
    svc = await processes.start(engine)
    started = await uc.create_response(svc, request(input="x", background=True), OWNER)
    await asyncio.sleep(0.05)
    final = await stopping.cancel_response(svc, started.response.id, OWNER)
    assert final.status == "cancelled"
    assert engine.aborted == [final.id]
    log = await svc.store.read(final.id)
    last = log[-1].event()
    assert isinstance(last, ResponseCancelled) and last.facts is not None
    assert last.facts.reason == "cancelled_by_user"
    assert replay(e.event() for e in log).response == final
    again = await stopping.cancel_response(svc, final.id, OWNER)
    assert again == final


async def test_a_cancel_stops_the_engine_here_before_the_row_is_flagged(
    processes: Processes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A generation running in this process stops at once: the flag's commit, however long
    the database takes with it, does not hold the engine up."""
    engine = ScriptedEngine(delay_s=0.01, tokens=1000)
    svc = await processes.start(engine)
    started = await uc.create_response(svc, request(input="x", background=True), OWNER)
    rid = started.response.id
    await asyncio.sleep(0.05)
    flagging, flagged = asyncio.Event(), asyncio.Event()
    flag = svc.index.request_cancel

    async def slow_flag(response_id: str, reason: Any) -> bool:
        flagging.set()
        await flagged.wait()
        return await flag(response_id, reason)

    monkeypatch.setattr(svc.index, "request_cancel", slow_flag)
    cancelling = asyncio.create_task(stopping.cancel_response(svc, rid, OWNER))
    await asyncio.wait_for(flagging.wait(), 5)
    async with asyncio.timeout(5):
        while not engine.aborted:  # noqa: ASYNC110 (the engine records its aborts in a list)
            await asyncio.sleep(0.01)
    assert engine.aborted == [rid] and not cancelling.done()
    flagged.set()
    final = await cancelling
    assert final.status == "cancelled"
    row = await svc.index.get(rid)
    assert row is not None and row.cancel_requested_at is not None
    assert row.cancel_reason == "cancelled_by_user"


async def test_cancel_of_a_plain_response_is_refused(processes: Processes) -> None:
    svc = await processes.start()
    final = await run_to_end(svc, input="x")
    with pytest.raises(InvalidRequest, match="background"):
        await stopping.cancel_response(svc, final.id, OWNER)


async def test_delete_hides_the_response_but_keeps_its_log(processes: Processes) -> None:
    svc = await processes.start()
    final = await run_to_end(svc, input="x")
    deleted = await stopping.delete_response(svc, final.id, OWNER)
    assert deleted == stopping.Deleted(id=final.id)
    with pytest.raises(NotFound):
        await reads.retrieve(svc, final.id, OWNER)
    with pytest.raises(NotFound):
        await stopping.delete_response(svc, final.id, OWNER)
    assert (await svc.store.read(final.id))[-1].terminal


async def test_store_false_responses_are_not_retrievable(processes: Processes) -> None:
    svc = await processes.start()
    final = await run_to_end(svc, input="x", store=False)
    assert final.status == "completed"
    with pytest.raises(NotFound):
        await reads.retrieve(svc, final.id, OWNER)


async def test_input_items_pages_in_both_orders(processes: Processes) -> None:
    svc = await processes.start()
    items = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    final = await run_to_end(svc, input=items)
    page = await reads.list_input_items(svc, final.id, OWNER, after=None, limit=2, order="asc")
    assert [text_of_input([i]) for i in page.data] == ["m0", "m1"] and page.has_more
    rest = await reads.list_input_items(
        svc, final.id, OWNER, after=page.last_id, limit=10, order="asc"
    )
    assert [text_of_input([i]) for i in rest.data] == ["m2", "m3", "m4"] and not rest.has_more
    desc = await reads.list_input_items(svc, final.id, OWNER, after=None, limit=20, order="desc")
    assert [text_of_input([i]) for i in desc.data] == ["m4", "m3", "m2", "m1", "m0"]
    with pytest.raises(InvalidRequest):
        await reads.list_input_items(svc, final.id, OWNER, after=None, limit=0, order="asc")


async def test_input_items_paging_ends_over_a_log_with_one_id_twice(processes: Processes) -> None:
    """Create now refuses two items with one id; a log written before (or imported) may
    hold them, and paging by id still ends in both orders, listing each id once."""
    svc = await processes.start()
    req = request(input=[{"role": "user", "content": f"m{i}", "id": f"msg_{i}"} for i in range(5)])
    dup = [msgspec.structs.replace(i, id="msg_1") if i.id == "msg_3" else i for i in req.input]
    started = await uc.create_response(svc, msgspec.structs.replace(req, input=dup), OWNER)
    assert started.generation is not None
    rid = project(await started.generation.wait()).id
    orders: list[tuple[Literal["asc", "desc"], list[str]]] = [
        ("asc", ["m0", "m1", "m2", "m4"]),
        ("desc", ["m4", "m2", "m1", "m0"]),
    ]
    for order, expected in orders:
        seen: list[str] = []
        after: str | None = None
        for _ in range(10):
            page = await reads.list_input_items(
                svc,
                rid,
                OWNER,
                after=after,
                limit=1,
                order=order,  # type: ignore[arg-type]
            )
            seen += [text_of_input([i]) for i in page.data]
            if not page.has_more:
                break
            after = page.last_id
        assert seen == expected, order


class FailingEngine:
    name = "failing"
    media: frozenset[str] = frozenset()

    def __init__(self, after: int, error: Exception | None) -> None:
        self.after, self.error = after, error

    def models(self) -> list[str]:
        return ["m"]

    def context_window(self, model: str) -> int | None:
        return None

    def serves(self, model: str) -> bool:
        return True

    async def ready(self) -> bool:
        return True

    async def aclose(self) -> None:
        pass

    async def generate(self, prompt: Prompt) -> AsyncIterator[AnyDelta]:
        for _ in range(self.after):
            yield TextDelta(text="tok ")
        if self.error is not None:
            raise self.error


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (
            EngineError(
                "cannot connect to sglang at http://10.0.0.5:30000", code="engine_unavailable"
            ),
            "engine_unavailable",
        ),
        (None, "protocol_error"),
        (RuntimeError("boom"), "internal_error"),
    ],
)
async def test_engine_failures_end_the_response_failed_and_keep_partial_output(
    processes: Processes, error: Exception | None, reason: str
) -> None:
    svc = await processes.start(FailingEngine(3, error))
    final = await run_to_end(svc, input="x")
    assert final.status == "failed" and final.error is not None
    assert final.error.code == "server_error"
    assert "boom" not in final.error.message and "10.0.0.5" not in final.error.message
    assert text_of(final) == "tok tok tok "
    last = (await svc.store.read(final.id))[-1].event()
    assert isinstance(last, ResponseFailed) and last.facts is not None
    assert last.facts.reason == reason
    if error is not None:  # the whole story stays in the log's hidden facts, for audit
        assert last.facts.detail is not None and str(error) in last.facts.detail


async def test_shutdown_ends_running_generations_as_failed(processes: Processes) -> None:
    svc = await processes.start(ScriptedEngine(delay_s=0.05, tokens=1000))
    started = await uc.create_response(svc, request(input="x", background=True), OWNER)
    await asyncio.sleep(0.1)
    await svc.runner.shutdown(0)
    final = await reads.retrieve(svc, started.response.id, OWNER)
    assert final.status == "failed" and final.error is not None
    assert "shut down" in final.error.message


async def test_usage_is_what_the_engine_reported(processes: Processes) -> None:
    class Counting(FailingEngine):
        async def generate(self, prompt: Prompt) -> AsyncIterator[AnyDelta]:
            yield TextDelta(text="a")
            yield Finished(
                reason="stop",
                usage=TokenUsage(
                    input_tokens=11, cached_tokens=4, output_tokens=7, reasoning_tokens=2
                ),
            )

    svc = await processes.start(Counting(0, None))
    final = await run_to_end(svc, input="x")
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.input_tokens_details.cached_tokens) == (11, 4)
    assert (final.usage.output_tokens, final.usage.output_tokens_details.reasoning_tokens) == (7, 2)
    assert final.usage.total_tokens == 18


class Watched(ScriptedEngine):
    """The scripted engine, noting when a generation began."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.began: list[str] = []

    async def generate(self, prompt: Prompt) -> AsyncIterator[AnyDelta]:
        self.began.append(prompt.response_id)
        async for delta in super().generate(prompt):
            yield delta


def hold_creations(svc: Bundle, hold_s: float, fail: bool = False) -> list[tuple[str, ...]]:
    """Make the writer's flushes that create a stream take `hold_s` longer (or, with `fail`,
    refuse it, as a commit does whose guard misses); each one notes the generations begun
    by then and those whose lease a renewal would look for."""
    notes: list[tuple[str, ...]] = []
    store = svc.writer.store  # type: ignore[attr-defined]
    commit = store.commit

    async def held(batches: list[Append], **kw: object) -> dict[str, BaseException]:
        new = [b.stream_id for b in batches if b.expected_version == -1]
        if not new:
            return dict(await commit(batches, **kw))
        await asyncio.sleep(hold_s)
        notes.append((*svc.runner.running(),))
        if fail:
            return {rid: Conflict(f"{rid} exists") for rid in new}
        return dict(await commit(batches, **kw))

    store.commit = held
    return notes


async def test_the_engine_starts_while_the_first_events_commit(processes: Processes) -> None:
    """The commit of a plain response's first events overlaps its first token; a renewal
    meanwhile does not look for a lease the row does not have yet."""
    engine = Watched(delay_s=0.02, tokens=5)
    svc = await processes.start(engine)
    notes = hold_creations(svc, 0.05)
    began: list[list[str]] = []
    engine_generate = engine.generate

    def noted(prompt: Prompt) -> AsyncIterator[AnyDelta]:
        began.append([prompt.response_id, str(len(notes))])  # commits done by then
        return engine_generate(prompt)

    engine.generate = noted  # type: ignore[method-assign]
    started = await uc.create_response(svc, request(input="x"), OWNER)
    rid = started.response.id
    assert began == [[rid, "0"]]  # the engine began before the first events committed
    assert notes == [()]  # and meanwhile no lease of it was renewed
    assert svc.runner.running() == [rid]
    final = project(await started.generation.wait())  # type: ignore[union-attr]
    assert final.status == "completed"
    assert project(replay(await svc.store.read_events(rid))) == final  # whole, in order


async def test_a_create_whose_first_events_fail_to_commit_stops_its_generation_quietly(
    processes: Processes, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Watched(delay_s=0.01, tokens=50)
    svc = await processes.start(engine)
    hold_creations(svc, 0.03, fail=True)
    with caplog.at_level("WARNING"), pytest.raises(Conflict):
        await uc.create_response(svc, request(input="x"), OWNER)
    [rid] = engine.began
    gen = svc.runner.get(rid)
    if gen is not None:
        await gen.wait()
    assert svc.runner.get(rid) is None
    assert await svc.store.read(rid) == []
    assert not [r for r in caplog.records if r.name == "resplog.runner"]


async def test_a_caller_gone_while_the_first_events_commit_cancels_the_generation(
    processes: Processes,
) -> None:
    engine = Watched(delay_s=0.01, tokens=1000)
    svc = await processes.start(engine)
    hold_creations(svc, 0.05)
    create = asyncio.create_task(uc.create_response(svc, request(input="x"), OWNER))
    await asyncio.sleep(0.02)
    create.cancel()
    with pytest.raises(asyncio.CancelledError):
        await create
    [rid] = engine.began
    gen = svc.runner.get(rid)
    assert gen is not None
    final = project(await gen.wait())
    assert final.status == "cancelled"
    last = (await svc.store.read(rid))[-1].event()
    assert isinstance(last, ResponseCancelled) and last.facts is not None
    assert last.facts.reason == "client_disconnected"


async def test_a_slow_streams_sse_gets_keepalives_from_its_tails_idle_wakes(
    processes: Processes,
) -> None:
    """A create's stream written by `frames` over the store's real tail: while the engine
    is slow the tail says it is idle at each poll, and a keep-alive goes out once one is
    due; between them the stream is every stored event, in order, then `[DONE]`."""
    svc = await processes.start(ScriptedEngine(delay_s=0.15, tokens=3))
    tail = await modes.create_and_stream(svc, request(input="hi", stream=True), OWNER)
    async with asyncio.timeout(20):
        writes = [w async for w in sse.frames(tail, keepalive_s=0.05)]
    assert writes.count(sse.KEEPALIVE) >= 3  # the engine idles 0.15 s before each delta
    assert writes[0] != sse.KEEPALIVE  # the first events are committed before the stream
    body = b"".join(w for w in writes if w != sse.KEEPALIVE)
    rid = msgspec.json.decode(body.split(b"data: ", 1)[1].split(b"\n", 1)[0])["response"]["id"]
    stored = await svc.store.read(rid)
    assert stored[-1].type == "response.completed"
    assert body == b"".join(sse.sse_frame(e) for e in stored) + sse.DONE


def test_a_model_the_engine_does_not_serve_is_openais_404() -> None:
    """`GET /v1/models/{model}` on a server started with `--model`: that name only."""
    from types import SimpleNamespace

    from adapters.engines.scripted import ScriptedEngine
    from service.status import retrieve_model

    svc: Any = SimpleNamespace(engine=ScriptedEngine(model="gpt-oss-120b", only_model=True))
    assert retrieve_model(svc, "gpt-oss-120b").id == "gpt-oss-120b"
    with pytest.raises(NotFound) as missing:
        retrieve_model(svc, "gpt-5")
    assert missing.value.code == "model_not_found" and missing.value.param == "model"
    assert str(missing.value) == (
        "The model 'gpt-5' does not exist or you do not have access to it."
    )
