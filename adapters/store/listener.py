"""The PostgreSQL doorbells: one dedicated LISTEN connection per process that reports the
streams other processes moved (and rings the other channels it is given: queued work,
cancellations), reconnecting with backoff when it drops.

A notification only says *which* streams moved; the table is then re-read. While the
connection is down notifications are simply lost, so after every (re)connect it reports
"everything may have moved" (and hands every other channel `None`), and tails poll on a
timeout regardless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import asyncpg

from adapters.store.hub import stream_key
from service.work.tasks import stop_task

log = logging.getLogger(__name__)

CHANNEL = "resplog_events"
# Told the stream keys that moved, or None for "anything may have moved".
RingFn = Callable[[list[str] | None], None]
# Told a notification's payload, or None after a (re)connect ("anything may have happened").
ChannelFn = Callable[[str | None], None]
MANY = "*"
LISTEN_CONNECT_TIMEOUT = 10.0  # seconds to open the LISTEN connection
# PostgreSQL refuses payloads of 8000 bytes or more; stay well inside.
_PAYLOAD_LIMIT = 7900


def doorbell_payload(origin: str, stream_ids: Sequence[str]) -> str:
    """`origin|key,key,...` naming the streams by `stream_key`, or `origin|*` when even
    that would not fit one notification."""
    keys = sorted({stream_key(s) for s in stream_ids})
    payload = f"{origin}|{','.join(keys)}"
    if len(payload) > _PAYLOAD_LIMIT:
        return f"{origin}|{MANY}"
    return payload


def parse_payload(payload: str) -> tuple[str, list[str] | None]:
    """(origin, stream keys); None for the keys means "many: re-read everything"."""
    origin, _, ids = payload.partition("|")
    if ids == MANY:
        return origin, None
    return origin, [i for i in ids.split(",") if i]


class Listener:
    """Keeps one LISTEN connection alive and passes on what the notifications name."""

    def __init__(
        self,
        dsn: str,
        ring: RingFn,
        origin: str,
        *,
        channels: Mapping[str, ChannelFn] | None = None,
        health_interval: float = 5.0,
        max_backoff: float = 5.0,
        connect: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        self._dsn = dsn
        # How to connect instead of `asyncpg.connect(dsn)`: to several hosts at once.
        self._connect = connect
        self._ring = ring
        self._own = f"{origin}|"  # how this process's own notifications begin
        self._channels = dict(channels or {})
        self._health_interval = health_interval
        self._max_backoff = max_backoff
        self._task: asyncio.Task[None] | None = None
        self._conn: Any = None
        self.connected = asyncio.Event()

    @property
    def backend_pid(self) -> int | None:
        """The server process of the LISTEN connection (tests terminate it)."""
        return None if self._conn is None else int(self._conn.get_server_pid())

    async def start(self) -> None:
        """Start listening; returns once the first connection is up (or failed once)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="resplog-listener")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.connected.wait(), timeout=10)

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)
        self.connected.clear()

    async def _run(self) -> None:
        backoff = 0.05
        while True:
            try:
                await self._listen_once()
                log.warning("doorbell connection closed; reconnecting")
                backoff = 0.05
            except (
                OSError,
                asyncpg.PostgresError,
                asyncpg.InterfaceError,
                asyncpg.TargetServerAttributeNotMatched,  # no primary yet: a failover
            ) as exc:
                log.warning("doorbell connection lost (%s); reconnecting in %.2fs", exc, backoff)
            except Exception:  # never let the listener die (nor `stop` raise it): tails poll
                log.exception("doorbell connection failed; reconnecting in %.2fs", backoff)
            self.connected.clear()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff)

    async def _listen_once(self) -> None:
        if self._connect is not None:
            conn = await self._connect()
        else:
            conn = await asyncpg.connect(self._dsn, timeout=LISTEN_CONNECT_TIMEOUT)
        lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        conn.add_termination_listener(lambda _c: _settle(lost))
        try:
            await conn.add_listener(CHANNEL, self._on_notify)
            for channel in self._channels:
                await conn.add_listener(channel, self._on_channel)
            self._conn = conn
            self.connected.set()
            # Anything may have moved while nobody was listening.
            self._ring(None)
            for handler in self._channels.values():
                handler(None)
            await self._watch(conn, lost)
        finally:
            self._conn = None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), timeout=2)

    async def _watch(self, conn: Any, lost: asyncio.Future[None]) -> None:
        """Return when the connection is gone: terminated, or not answering a probe."""
        while not lost.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(lost), timeout=self._health_interval)
            if not lost.done():
                await asyncio.wait_for(conn.fetchval("SELECT 1"), timeout=self._health_interval)

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        # Our own commits were handed to the hub directly: one look at the origin, before
        # splitting a payload of up to 8,000 bytes (every flush of this process comes back).
        if payload.startswith(self._own):
            return
        _origin, keys = parse_payload(payload)
        self._ring(keys)

    def _on_channel(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        handler = self._channels.get(channel)
        if handler is not None:
            handler(payload)


def _settle(lost: asyncio.Future[None]) -> None:
    if not lost.done():
        lost.set_result(None)
