"""The group-commit writer: appends of every stream in this process are queued and one
flusher commits them together, one transaction per flush.

Why: a commit costs a round trip and a WAL flush whatever its size, so one commit per token
caps a 2-core box at a few thousand events/s; batching the commits (not the events: each
event keeps its own row) lifts that an order of magnitude and frees CPU.

Per stream the writer keeps the queued head, so an append that does not continue it fails
at once with `Conflict`. The first append of a stream the writer is not already carrying is
trusted up to the database guard, which decides at commit time. A stream whose flush failed
stays failed for appends that continue its lost chain (same expected version as the head
that was queued); an append from any other version is a fresh start (the caller reloaded).

On Citus a flush is a transaction per shard, and one shard may be unreachable (a worker
stopped) while the others commit. The streams of the shards that committed are settled at
once; each stream whose shard was unreachable (`Unreached`) is parked: its batch, the same
events with the same expected version, is retried alone on its own backoff, its later
appends wait behind it, and the flusher goes on committing every other stream meanwhile. A
parked stream's creation is refused after `create_retry_for`, the rest after `retry_for`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Sequence

from adapters.store.rows import Append, encode_append, merge
from adapters.store.sql import Failures, SqlEventStore
from adapters.store.transient import Unreached, is_transient, store_error
from domain.errors import Conflict, StoreError, StoreUnavailable
from domain.events import AnyEvent
from domain.objects import TERMINAL_STATUSES
from service.ports import LogObserver

log = logging.getLogger(__name__)


class _Pending:
    """One caller's append in the queue; `waiter` is set for a durable append."""

    __slots__ = ("append", "size", "waiter")

    def __init__(self, append: Append, waiter: asyncio.Future[None] | None) -> None:
        self.append = append
        self.waiter = waiter
        self.size = len(append.rows)


class _Stream:
    """The writer's view of one stream while it has uncommitted appends (or has failed)."""

    __slots__ = (
        "backoff",
        "deferred",
        "failing_since",
        "failure",
        "head",
        "parked",
        "queued",
        "retry_at",
        "space",
        "stream_id",
        "unsettled",
    )

    def __init__(self, stream_id: str, head: int) -> None:
        self.stream_id = stream_id
        self.head = head  # last queued position
        self.queued: deque[_Pending] = deque()  # not yet taken by a flush
        self.unsettled = 0  # events queued or in flight
        self.failure: BaseException | None = None
        self.space = asyncio.Event()
        # Parked (its shard unreachable): the appends of the batch to retry alone, when
        # (`retry_at`, the loop's clock), since when it has failed, and the next wait.
        self.parked: list[_Pending] | None = None
        self.retry_at = 0.0
        self.failing_since = 0.0
        self.backoff = 0.0
        # The flusher's turns (`_fifo` entries) this stream let pass while parked: given
        # back when it is unparked, one for each append still queued.
        self.deferred = 0


def _again(exc: BaseException) -> BaseException:
    """A fresh exception for each waiter (one instance raised in many tasks would share and
    grow one traceback)."""
    if isinstance(exc, Conflict | StoreError):
        fresh = type(exc)(str(exc))
        fresh.__cause__ = exc.__cause__
        return fresh
    return exc


def _resolve(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


def _reject(waiter: asyncio.Future[None] | None, exc: BaseException) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_exception(_again(exc))


class GroupCommitWriter:
    """Implements `EventWriter` over a store; `start()` it, `close()` it (which drains)."""

    def __init__(
        self,
        store: SqlEventStore,
        *,
        flush_interval: float = 0.005,
        max_batch_events: int = 5000,
        max_pending_per_stream: int = 1000,
        retry_for: float = 30.0,
        create_retry_for: float = 0.1,
        max_failed_streams: int = 10_000,
    ) -> None:
        self.store = store
        self.flush_interval = flush_interval
        self.max_batch_events = max_batch_events
        self.max_pending_per_stream = max_pending_per_stream
        self.retry_for = retry_for
        self.create_retry_for = create_retry_for
        self.max_failed_streams = max_failed_streams
        self._streams: dict[str, _Stream] = {}
        self._failed: OrderedDict[str, None] = OrderedDict()
        # One entry per queued append, in arrival order: a turn of its stream, which takes
        # the stream's oldest queued append (`_take`), so a stream's appends always go in
        # their order whatever turns an unparked stream gets back.
        self._fifo: deque[_Stream] = deque()
        # The streams whose last flush could not reach their shard (see the module).
        self._parked: dict[str, _Stream] = {}
        # The streams a flush that started within the last interval carried and did not
        # end: that flush's start, and whether it created the stream; oldest first
        # (`_at_once`).
        self._recent: OrderedDict[str, tuple[float, bool]] = OrderedDict()
        self._queued_events = 0
        self._work = asyncio.Event()
        self._full = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing = False
        # Set while a flush is riding out transient errors: a stream is then refused at its
        # creation (nothing is queued for it, so the caller can answer 503 at once), while
        # the streams already queued keep retrying.
        self._outage = False
        self._task: asyncio.Task[None] | None = None
        self.flushes = 0  # commits so far (for the benchmark and tests)
        self.flush_seconds = 0.0  # time spent committing them
        self.observer: LogObserver | None = None  # told of every flush (metrics)

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="resplog-flusher")

    async def close(self) -> None:
        """Commit everything queued, then stop the flusher; later appends raise."""
        if self._fifo or self._parked:
            await self.start()  # never started, but holding appends: drain them too
        self._closing = True
        self._work.set()
        self._full.set()
        task, self._task = self._task, None
        if task is not None:
            await task

    async def __aenter__(self) -> GroupCommitWriter:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    @property
    def outage(self) -> bool:
        """Whether a flush is riding out transient errors now (new streams are refused)."""
        return self._outage

    async def flush(self) -> None:
        """Wait until everything queued so far is committed (or failed); needs `start()`."""
        self._full.set()
        await self._idle.wait()

    # --- appends --------------------------------------------------------------------------

    async def append(
        self,
        stream_id: str,
        expected_version: int,
        events: Sequence[AnyEvent],
        *,
        durable: bool = True,
        lease: bool = False,
    ) -> None:
        """Queue `events` after `expected_version`; see `service.ports.EventWriter`."""
        if not events:
            if self._closing:
                raise RuntimeError("the writer is closed")
            return
        # Queue before the first await: a caller cancelled anywhere inside this call still
        # has its events queued, so its idea of the stream's version stays true.
        stream, pending = self._queue(stream_id, expected_version, events, durable, lease)
        await self._room(stream)
        if pending.waiter is not None:
            await pending.waiter

    def create(
        self, stream_id: str, events: Sequence[AnyEvent], *, lease: bool = False
    ) -> asyncio.Future[None]:
        """Queue a new stream's first events now; see `service.ports.EventWriter`."""
        if not events:
            raise ValueError("a stream is created by its first events")
        waiter = self._queue(stream_id, -1, events, True, lease)[1].waiter
        assert waiter is not None
        # Nothing else is queued on a new stream, so no backpressure applies: the commit
        # of these events is the only thing to wait for.
        return waiter

    def _queue(
        self,
        stream_id: str,
        expected_version: int,
        events: Sequence[AnyEvent],
        durable: bool,
        lease: bool,
    ) -> tuple[_Stream, _Pending]:
        if self._closing:
            raise RuntimeError("the writer is closed")
        if self._outage and expected_version == -1:
            raise StoreUnavailable("the database cannot be reached; retry shortly")
        append = encode_append(stream_id, expected_version, events, lease=lease)
        stream = self._admit(append)
        pending = _Pending(append, asyncio.get_running_loop().create_future() if durable else None)
        stream.queued.append(pending)
        stream.head = append.last
        stream.unsettled += pending.size
        self._fifo.append(stream)
        self._queued_events += pending.size
        self._idle.clear()
        self._work.set()
        if self._queued_events >= self.max_batch_events:
            self._full.set()
        return stream, pending

    async def _room(self, stream: _Stream) -> None:
        """Backpressure: wait while this stream has too many uncommitted events."""
        while stream.unsettled > self.max_pending_per_stream and stream.failure is None:
            stream.space.clear()
            await stream.space.wait()

    def _admit(self, append: Append) -> _Stream:
        """The stream record to queue `append` on, or `Conflict` if it cannot follow."""
        stream = self._streams.get(append.stream_id)
        if stream is None:
            stream = self._streams[append.stream_id] = _Stream(
                append.stream_id, append.expected_version
            )
            return stream
        if stream.failure is not None:
            if append.expected_version == stream.head:
                raise _again(stream.failure)
            stream.failure = None  # a fresh start: the caller reloaded the stream
            self._failed.pop(append.stream_id, None)
            stream.head = append.expected_version
        if append.expected_version != stream.head:
            raise Conflict(
                f"stream {append.stream_id}: expected version {append.expected_version}, "
                f"but this writer has queued up to {stream.head}"
            )
        return stream

    # --- the flusher ----------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last_start = -1e9
        while True:
            if not self._fifo and not self._parked:
                self._idle.set()
                if self._closing:
                    return
                self._work.clear()
                await self._work.wait()
                continue
            if not self._fifo:  # only parked streams: sleep until the first is due
                wait = min(s.retry_at for s in self._parked.values()) - loop.time()
                if wait > 0:
                    self._work.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await self._work.wait()
                    continue
            # Leading-edge group commit: flush at once after a quiet spell, else at most
            # once per interval; a full batch does not wait, nor does a lone stream's start
            # or end.
            now = loop.time()
            delay = last_start + self.flush_interval - now
            if delay > 0 and self._queued_events < self.max_batch_events and not self._at_once(now):
                self._full.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):  # no task per flush, as `wait_for` makes
                        await self._full.wait()
            last_start = loop.time()
            taken, retried = self._take(last_start)
            if taken:
                await self._flush(taken, last_start, retried)

    def _at_once(self, now: float) -> bool:
        """Whether the queued appends are a lone stream's creation, its first append after
        that, or its last: then the interval would gather nothing, only sleep. Alone: the
        one stream queued, and no other was in a flush that started within the last
        interval (or each that was ended there). A create that overlaps no other
        (`created`; its first output; the rest to `completed`) then commits in three
        flushes back to back instead of three an interval apart, and its process never
        sleeps between them (one that wakes after a sleep of a few milliseconds runs its
        next steps several times slower, docs/performance.md, "A create alone"). Between
        its start and its end a lone stream is paced by the interval as before: a fast
        engine's tokens wait and commit together, not a flush each."""
        if len(self._streams) != 1:
            return False
        recent = self._forget(now)
        stream = next(iter(self._streams.values()))
        seen = recent.get(stream.stream_id)
        if len(recent) > (seen is not None):
            return False  # another stream is about: the interval batches them
        if seen is not None and seen[1]:
            return True  # the first append after its creation
        return any(
            p.append.expected_version == -1  # its creation
            or (p.append.lifecycle is not None and p.append.lifecycle.status in TERMINAL_STATUSES)
            for p in stream.queued
        )

    def _forget(self, now: float) -> OrderedDict[str, tuple[float, bool]]:
        """`_recent` without the streams last flushed an interval or more before `now`."""
        recent = self._recent
        horizon = now - self.flush_interval
        while recent:
            oldest = next(iter(recent))
            if recent[oldest][0] > horizon:
                break
            del recent[oldest]
        return recent

    def _take(self, now: float) -> tuple[dict[_Stream, list[_Pending]], bool]:
        """What the next flush commits, and whether it retries a parked batch: the parked
        batches that are due, each exactly as it went before (a retry whose earlier attempt
        did commit recognises its own rows only if they are the same), then queued appends
        in their order, skipping the streams still parked."""
        taken: dict[_Stream, list[_Pending]] = {}
        size = 0
        for stream in [s for s in self._parked.values() if s.retry_at <= now]:
            assert stream.parked is not None
            taken[stream] = stream.parked
            size += sum(p.size for p in stream.parked)
        retried = bool(taken)
        while self._fifo and size < self.max_batch_events:
            stream = self._fifo.popleft()
            if not stream.queued:
                continue  # its append failed, or an earlier turn took it
            if stream.parked is not None:
                stream.deferred += 1
                continue
            pending = stream.queued.popleft()
            taken.setdefault(stream, []).append(pending)
            size += pending.size
            self._queued_events -= pending.size
        return taken, retried

    async def _flush(
        self, taken: dict[_Stream, list[_Pending]], started: float, retried: bool = False
    ) -> None:
        began = time.perf_counter()
        batches = [merge([p.append for p in pendings]) for pendings in taken.values()]
        recent = self._forget(started)
        for batch in batches:
            if batch.lifecycle is not None and batch.lifecycle.status in TERMINAL_STATUSES:
                recent.pop(batch.stream_id, None)
            else:
                recent[batch.stream_id] = (started, batch.expected_version == -1)
                recent.move_to_end(batch.stream_id)
        try:
            failures = await self._commit(batches, retried)
        except Exception as exc:  # never let the flusher die: fail this flush's appends
            log.exception("flush failed")
            failures = {b.stream_id: store_error(exc) for b in batches}
        seconds = time.perf_counter() - began
        self.flushes += 1
        self.flush_seconds += seconds
        self._settle(taken, failures)
        if self.observer is not None:
            self._report(batches, failures, seconds)

    def _report(self, batches: Sequence[Append], failures: Failures, seconds: float) -> None:
        committed = [e for b in batches if b.stream_id not in failures for e in b.events]
        try:
            assert self.observer is not None
            self.observer.flushed(committed, seconds, len(failures), self._queued_events)
        except Exception:  # a metric must never stop the log
            log.exception("the flush observer failed")

    async def _commit(self, batches: Sequence[Append], retried: bool) -> Failures:
        """Commit, retrying transient errors (with a re-check, so nothing is doubled; a
        flush that retries a parked batch re-checks from its first attempt)."""
        try:
            return await self._commit_retrying(batches, retried)
        finally:
            self._outage = False

    async def _commit_retrying(self, batches: Sequence[Append], retried: bool) -> Failures:
        """Ride out transient errors for streams that exist. A stream's creation gets only
        `create_retry_for` seconds (enough for a retry to find its own rows should an
        attempt have committed and lost the acknowledgement): its caller has handed no id to
        anyone yet, so it is answered at once (`StoreUnavailable`, HTTP 503) instead of
        after the whole window, and each later creation tries the database afresh."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        delay, attempt = 0.02, 0
        refused: Failures = {}
        while True:
            try:
                recheck = retried or attempt > 0
                return {**await self.store.commit(batches, recheck=recheck), **refused}
            except Exception as exc:
                if not is_transient(exc):
                    raise
                waited = loop.time() + delay - began
                if waited > self.create_retry_for:
                    batches, refused = _refuse_creations(batches, exc, refused)
                    if not batches:
                        return refused
                if waited > self.retry_for:
                    raise
                self._outage = True
                log.warning("flush attempt %d failed (%s); retrying", attempt + 1, exc)
            await asyncio.sleep(delay)
            delay, attempt = min(delay * 2, 1.0), attempt + 1

    def _settle(self, taken: dict[_Stream, list[_Pending]], failures: Failures) -> None:
        now = asyncio.get_running_loop().time()
        for stream, pendings in taken.items():
            failure = failures.get(stream.stream_id)
            if isinstance(failure, Unreached) and self._park(stream, pendings, failure, now):
                continue
            self._unpark(stream)
            stream.unsettled -= sum(p.size for p in pendings)
            if failure is None:
                for pending in pendings:
                    _resolve(pending.waiter)
            else:
                self._fail(stream, failure, pendings)
            stream.space.set()
            if stream.unsettled == 0 and stream.failure is None and not stream.queued:
                del self._streams[stream.stream_id]

    def _park(
        self, stream: _Stream, pendings: list[_Pending], failure: Unreached, now: float
    ) -> bool:
        """Park `stream` with its batch `pendings` to retry alone later (see the module);
        False when it has been failing too long (a creation: `create_retry_for`), for the
        caller to fail it."""
        if stream.parked is None:
            stream.failing_since, stream.backoff = now, 0.02
        waited = now + stream.backoff - stream.failing_since
        creation = pendings[0].append.expected_version == -1
        if waited > (self.create_retry_for if creation else self.retry_for):
            return False
        if stream.parked is None:
            log.warning(
                "stream %s cannot reach its shard (%s); retrying", stream.stream_id, failure
            )
        stream.parked = pendings
        stream.retry_at = now + stream.backoff
        stream.backoff = min(stream.backoff * 2, 1.0)
        self._parked[stream.stream_id] = stream
        return True

    def _unpark(self, stream: _Stream) -> None:
        """`stream` is no longer parked: its turns that went by come back."""
        if stream.parked is None:
            return
        stream.parked = None
        del self._parked[stream.stream_id]
        self._fifo.extend([stream] * stream.deferred)
        stream.deferred = 0
        if stream.queued:
            self._work.set()

    def _fail(self, stream: _Stream, failure: BaseException, pendings: list[_Pending]) -> None:
        """The stream's flushed appends failed; so do its queued ones (they followed them)."""
        stream.failure = failure
        for pending in pendings:
            _reject(pending.waiter, failure)
        for pending in stream.queued:
            stream.unsettled -= pending.size
            self._queued_events -= pending.size
            _reject(pending.waiter, failure)
        stream.queued.clear()
        self._failed[stream.stream_id] = None
        self._failed.move_to_end(stream.stream_id)
        while len(self._failed) > self.max_failed_streams:
            old, _ = self._failed.popitem(last=False)
            record = self._streams.get(old)
            if record is not None and record.failure is not None and record.unsettled == 0:
                del self._streams[old]


def _refuse_creations(
    batches: Sequence[Append], exc: Exception, refused: Failures
) -> tuple[list[Append], Failures]:
    """Split off the batches that create their stream, failing them with `exc`'s
    `StoreUnavailable`. Should the failed attempt have committed one after all (a lost
    acknowledgement), it is a response nobody was told of, recovered as one whose process
    died right after creating it (crash recovery, docs/invariants.md)."""
    error = store_error(exc)
    keep = [b for b in batches if b.expected_version != -1]
    return keep, {**refused, **{b.stream_id: error for b in batches if b.expected_version == -1}}
