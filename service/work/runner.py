"""Drives one engine generation into the log, and keeps the generations of this process.

The runner task is the single writer of its stream while it runs. A cancel (by the user,
by a client that went away, or by shutdown) is delivered as `Task.cancel()`, so it
interrupts whatever the task awaits: the engine's next batch (closing the inbox closes the
engine's iterator, which aborts the generation there) or a flush. That is safe because
`EventWriter.append` queues events before its first await, and the runner advances its
state before awaiting, so the state always matches what was handed to the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable

from domain.builder.emit import emit
from domain.builder.finish import finish
from domain.builtins import pending_server_call
from domain.commands import cancel, fail, start
from domain.errors import Conflict, EngineError, InvalidTransition
from domain.events import AnyEvent
from domain.generation import (
    AnyDelta,
    ApprovalRequest,
    Compacted,
    Compaction,
    EndItem,
    Finished,
    Prompt,
    TokenUsage,
)
from domain.objects import ServerCall
from domain.reasons import CancelReason, FailReason
from domain.state import Decision, ResponseState
from service.observe import UNOBSERVED, GenerationTrace, Tracer, WorkObserver
from service.ports import Engine, EventWriter
from service.prompts.engine import engine_prompt
from service.tools.calls import tool_calls
from service.tools.mcploop import ToolLoop
from service.work.batching import Inbox

log = logging.getLogger("resplog.runner")


class Generation:
    """One running generation: its task and, once asked, why it is being cancelled."""

    def __init__(self, response_id: str, created: asyncio.Future[None] | None = None) -> None:
        self.response_id = response_id
        # The commit of the response's first events, when the generation started before it
        # (`Runner.launch`'s `created`); None once it was committed before the launch.
        self.created = created
        self.cancel_reason: CancelReason | None = None
        self.task: asyncio.Task[ResponseState] | None = None
        self.trace: GenerationTrace = UNOBSERVED
        self.error: str | None = None  # why it failed, once it did (for its trace)
        # The engine's failure, once it failed so (a refusal's words: service/responses/modes.py)
        self.failure: EngineError | None = None

    async def wait(self) -> ResponseState:
        assert self.task is not None
        return await asyncio.shield(self.task)


class Runner:
    """Runs generations as tasks of this process; one writer per stream."""

    def __init__(
        self,
        writer: EventWriter,
        engine: Engine,
        clock: Callable[[], float] = time.time,
        tools: ToolLoop | None = None,
    ) -> None:
        self._writer = writer
        self._engine = engine
        self._clock = clock
        self.tools = tools  # runs `mcp` tools (service/tools/mcploop.py); None: they are not run
        self._running: dict[str, Generation] = {}
        self.observer: WorkObserver = UNOBSERVED  # metrics (service/observe.py)
        self.tracer: Tracer = UNOBSERVED  # traces, when configured

    def launch(
        self,
        state: ResponseState,
        prompt: Prompt,
        *,
        created: asyncio.Future[None] | None = None,
    ) -> Generation:
        """Start generating `state`'s response. `created`: the commit of its first events,
        still in flight (the engine starts meanwhile: the writer commits a stream's events
        in the order they were queued, so the generation's follow them). If that commit
        fails, the generation stops without a word: the create reports the failure."""
        gen = Generation(prompt.response_id, created)
        # Started here, in the launcher's context: under the create request's span.
        gen.trace = self.tracer.generation(prompt.response_id, prompt.model)
        gen.task = asyncio.create_task(self._run(gen, state, prompt), name=f"gen-{gen.response_id}")
        self._running[gen.response_id] = gen
        gen.task.add_done_callback(lambda _: self._running.pop(gen.response_id, None))
        return gen

    def get(self, response_id: str) -> Generation | None:
        return self._running.get(response_id)

    def running(self) -> list[str]:
        """The responses this process is generating now (the leases it must renew): not
        those whose first events are still being committed, whose row (and lease) a renewal
        would not find yet."""
        return [
            rid for rid, gen in self._running.items() if gen.created is None or gen.created.done()
        ]

    def request_cancel(self, response_id: str, reason: CancelReason) -> Generation | None:
        """Ask a running generation to stop; it appends the cancellation itself."""
        gen = self._running.get(response_id)
        if gen is not None and gen.task is not None and not gen.task.done():
            if gen.cancel_reason is None:
                gen.cancel_reason = reason
                # On the next pass of the loop: a task cancelled before its first step is
                # closed at its first line, so it could not append its own cancellation.
                asyncio.get_running_loop().call_soon(gen.task.cancel)
            return gen
        return None

    async def shutdown(self, grace_s: float = 0.0) -> None:
        """Let generations finish for `grace_s`, then end the rest as failed (shutdown).

        Generations launched meanwhile (a claim or a request already under way) are ended
        too: it repeats until none is left. Each round first lets just-launched tasks take
        their first step: one cancelled before it could not append its own end.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while True:
            await asyncio.sleep(0)
            tasks = [g.task for g in self._running.values() if g.task is not None]
            if not tasks:
                return
            if (left := deadline - loop.time()) > 0:
                await asyncio.wait(tasks, timeout=left)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _append(self, rid: str, before: ResponseState, d: Decision, *, durable: bool) -> None:
        if d.events:
            began = time.time_ns()
            await self._writer.append(rid, before.version, d.events, durable=durable)
            gen = self._running.get(rid)
            if gen is not None:
                gen.trace.committed(began, d.events, d.state)

    async def _run(self, gen: Generation, state: ResponseState, prompt: Prompt) -> ResponseState:
        end = state
        try:
            end = await self._guarded(gen, state, prompt)
            return end
        finally:
            gen.trace.end(end, gen.error)

    async def _guarded(
        self, gen: Generation, state: ResponseState, prompt: Prompt
    ) -> ResponseState:
        rid = gen.response_id
        holder = [state]  # the latest state handed to the writer, also when interrupted
        try:
            try:
                return await self._generate(rid, holder, prompt)
            except Exception:
                if await _uncreated(gen):  # nothing of it is in the log: nothing to end
                    return state
                raise
        except asyncio.CancelledError:
            reason = gen.cancel_reason
            end = await self._end(
                rid, holder[0], reason or FailReason.SERVER_SHUTDOWN, cancelled=reason is not None
            )
            if reason is None:
                raise
            return end
        except EngineError as exc:
            log.warning("generation %s failed: %s (%s)", rid, exc.message, exc.code)
            gen.error = exc.code
            gen.failure = exc
            self.observer.engine_failed(exc.code)
            return await self._end(rid, holder[0], exc.code, detail=exc.message)
        except Conflict:
            # Its lease was taken over, and the store's guard refused the append before a
            # renewal noticed (the other way a lease is found lost: service/work/leases.py).
            self.observer.lease_lost()
            log.warning("generation %s lost its stream to another writer; stopping", rid)
            return holder[0]
        except Exception as exc:
            log.exception("generation %s crashed", rid)
            gen.error = FailReason.INTERNAL_ERROR
            return await self._end(rid, holder[0], FailReason.INTERNAL_ERROR, detail=repr(exc))

    async def _generate(
        self, rid: str, holder: list[ResponseState], prompt: Prompt
    ) -> ResponseState:
        if holder[0].status == "queued":
            await self._step(rid, holder, start(holder[0]), durable=True)
        resp = holder[0].response
        if self.tools is not None and resp is not None and self.tools.runs(resp.tools):
            await self._tool_loop(rid, holder, prompt, self.tools)
            return holder[0]
        # The engine is read in the inbox's task while this one waits for the log, so what
        # arrives during an append becomes the next batch (service/work/batching.py).
        prompt = engine_prompt(prompt)
        inbox = Inbox(tool_calls(_deltas(self._engine, prompt), prompt.tools))
        try:
            while True:
                d = self._decide(holder[0], await inbox.take())
                await self._step(rid, holder, d, durable=True)
                if d.state.terminal:
                    return holder[0]
        finally:
            await inbox.close()  # aborts the generation on the engine if it still runs

    async def _tool_loop(
        self, rid: str, holder: list[ResponseState], prompt: Prompt, tools: ToolLoop
    ) -> None:
        async def step(d: Decision) -> None:
            await self._step(rid, holder, d, durable=True)

        async def generate(p: Prompt) -> Finished | None:
            return await self._generate_step(rid, holder, p)

        async def done(f: Finished) -> None:
            await step(finish(holder[0], f, now=int(self._clock())))

        await tools.run(holder, prompt, step, generate, done)

    async def _generate_step(
        self, rid: str, holder: list[ResponseState], prompt: Prompt
    ) -> Finished | None:
        """One generation of a tool loop, up to the model's MCP call (None: it is to be run;
        the generation is closed there, as harmony's model stops at its call) or its end."""
        inbox = Inbox(tool_calls(self._engine.generate(prompt), prompt.tools))
        try:
            while True:
                state, events = holder[0], []
                finished: Finished | None = None
                for delta in await inbox.take():
                    if isinstance(delta, Finished):
                        i = state.open_index
                        if i is not None and isinstance(
                            state.response and state.response.output[i], ServerCall
                        ):
                            delta = EndItem()  # a call cut off by the end is still a call
                        else:
                            finished = delta
                            break
                    d = emit(state, delta)
                    events += d.events
                    state = d.state
                    if isinstance(delta, ApprovalRequest):
                        # The client decides: the response ends here (docs/mcp.md).
                        finished = Finished(reason="stop", usage=TokenUsage())
                        break
                    if pending_server_call(state) is not None:
                        break
                await self._step(rid, holder, Decision(events, state), durable=True)
                if pending_server_call(state) is not None:
                    return None
                if finished is not None:
                    return finished
        finally:
            await inbox.close()

    def _decide(self, state: ResponseState, deltas: list[AnyDelta]) -> Decision:
        """The events of everything the engine sent since the last append, as one batch."""
        events: list[AnyEvent] = []
        for delta in deltas:
            if isinstance(delta, Finished):
                d = finish(state, delta, now=int(self._clock()))
            else:
                d = emit(state, delta)
            events += d.events
            state = d.state
            if state.terminal:
                break
        return Decision(events, state)

    async def _step(
        self, rid: str, holder: list[ResponseState], d: Decision, *, durable: bool
    ) -> None:
        before = holder[0]
        holder[0] = d.state
        await self._append(rid, before, d, durable=durable)

    async def _end(
        self,
        rid: str,
        state: ResponseState,
        reason: str,
        *,
        cancelled: bool = False,
        detail: str | None = None,
    ) -> ResponseState:
        """Append the terminal event; a cancel that lost the race to the end is a no-op."""
        if state.terminal:
            return state
        gen = self._running.get(rid)
        if gen is not None:
            with contextlib.suppress(asyncio.CancelledError):  # cancelled again: end it anyway
                if await _uncreated(gen):
                    return state
        try:
            if cancelled:
                d = cancel(state, reason=reason)
            else:
                d = fail(
                    state,
                    code="server_error",
                    message=_client_message(reason),
                    reason=reason,
                    detail=detail,
                )
            # The terminal event must land even while this task is being cancelled.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._append(rid, state, d, durable=True))
            return d.state
        except (Conflict, InvalidTransition):
            log.warning("generation %s: could not record its end (%s)", rid, reason)
            return state
        except Exception:
            log.exception("generation %s: could not record its end (%s)", rid, reason)
            return state


async def _uncreated(gen: Generation) -> bool:
    """Whether the commit of the generation's first events failed (it started before that
    commit: `Runner.launch`'s `created`), so nothing of its response is in the log; the
    create reports why. Waits for that commit if it is still in flight."""
    created = gen.created
    if created is None:
        return False
    try:
        await asyncio.shield(created)
    except asyncio.CancelledError:
        if created.cancelled():
            return True
        raise
    except Exception:
        return True
    return False


def _deltas(engine: Engine, prompt: Prompt) -> AsyncGenerator[AnyDelta, None]:
    """The engine's deltas; after the compaction item when the create made one (and
    nothing else when the compaction is the whole answer: Codex's trigger)."""
    if prompt.compaction is None:
        return engine.generate(prompt)
    return _compacted(engine, prompt, prompt.compaction)


async def _compacted(
    engine: Engine, prompt: Prompt, compaction: Compaction
) -> AsyncGenerator[AnyDelta, None]:
    yield Compacted(item=compaction.item)
    if compaction.only:
        yield Finished(reason="stop", usage=compaction.usage)
        return
    async with contextlib.aclosing(engine.generate(prompt)) as deltas:
        async for delta in deltas:
            yield delta


def _client_message(reason: str) -> str:
    """What the client is told; the engine's own message (its URL, upstream details) stays
    in the log and in the failed event's hidden `detail`."""
    if reason == FailReason.SERVER_SHUTDOWN:
        return "The server shut down before the response finished."
    if reason == FailReason.INTERNAL_ERROR:
        return "The server had an internal error while generating the response."
    return f"The generation engine failed ({reason})."
