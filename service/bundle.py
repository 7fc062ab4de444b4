"""The one bundle of a process's ports and parts that every use-case takes. Only the
composition roots build it (`adapters/wiring.py`, over the adapters that settings name)."""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from domain.events import ReasoningEvents
from service.ports import (
    ApiKeyStore,
    Archive,
    Collector,
    ConversationAudit,
    Conversations,
    Database,
    Doorbells,
    Engine,
    EventStore,
    EventWriter,
    Leases,
    Ledger,
    Leftovers,
    LogReader,
    Prompts,
    ResponseIndex,
    StreamScan,
)
from service.prompts.chains import ChainCache
from service.reasoning.sealing import Sealer
from service.webhooks.model import WebhookStore
from service.work.leases import LeaseKeeper
from service.work.runner import Runner


class Audit(msgspec.Struct, frozen=True, kw_only=True):
    """The ports of the audit and admin use-cases (service/audit/, the `resplog` admin
    commands and the `/audit` view): a process's own, or the CLI's over a database."""

    store: EventStore
    log: LogReader
    scan: StreamScan
    archive: Archive
    conversations: ConversationAudit
    collector: Collector
    leftovers: Leftovers
    keys: ApiKeyStore
    ledger: Ledger
    prompts: Prompts
    # Webhook endpoints, deliveries and attempts (service/webhooks/); None: not kept here.
    webhooks: WebhookStore | None = None


class Bundle(msgspec.Struct, frozen=True, kw_only=True):
    """The ports, plus this process's runner and lease keeper (which hold its running
    generations and background slots, so there is one of each per process)."""

    database: Database
    store: EventStore
    writer: EventWriter
    index: ResponseIndex
    leases: Leases
    bells: Doorbells
    keys: ApiKeyStore
    engine: Engine
    conversations: Conversations
    prompts: Prompts
    runner: Runner
    keeper: LeaseKeeper
    audit: Audit
    # How long a cancel (or delete) of a response running in another process waits for
    # that process to record the cancellation before answering with what is there.
    cancel_wait_s: float = 10.0
    # How the reasoning events of the responses this process creates are named; recorded
    # in each response's log, so the processes that generate or read it follow that.
    reasoning_events: ReasoningEvents = "openai"
    # The operator's bound on every model's context window (`--context-window`); the
    # engine's own applies too (service/prompts/window.py takes the smaller).
    context_window: int | None = None
    clock: Callable[[], float] = time.time
    # Seals reasoning for stateless clients; the engine above opens and seals through it.
    sealer: Sealer
    # This process's `previous_response_id` histories (service/prompts/chains.py).
    chains: ChainCache = msgspec.field(default_factory=ChainCache)
