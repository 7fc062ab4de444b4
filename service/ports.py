"""The ports the use-cases need: the event log (read, tail, group-committed append), the
response read model, leases and doorbells for work across processes, the generation engine,
the API keys, the MCP servers of `mcp` tools (`ToolServers`), and the audit's reads and
writes (the log scanned whole, an import, gc). Adapters implement them; only the
composition roots (the app factory and the CLI) pick which.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any, Protocol

import msgspec

from domain.conversations import ConversationItem, ConversationObject
from domain.events import TERMINAL_TAGS, AnyEvent, decode
from domain.generation import AnyDelta, Prompt
from domain.objects import TERMINAL_STATUSES
from domain.reasons import CancelReason
from domain.templates import PromptTemplate


class StoredEvent(msgspec.Struct, frozen=True, weakref=True):
    """One row of the log. `data` is the exact JSON a client receives for it. (Weakly
    referable, so that a store can hand every reader of a row the same object.)"""

    stream_id: str
    position: int
    type: str
    data: bytes
    facts: bytes | None
    recorded_at: float  # unix seconds

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_TAGS

    def event(self) -> AnyEvent:
        """Decode into the typed event; raises `CorruptEvent` naming stream and position."""
        return decode(self.data, self.facts, stream_id=self.stream_id, position=self.position)


class ResponseRow(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the `responses` read model, every column; written in the same transaction
    as its events. The store's table (`adapters/store/tables.py`) has exactly these columns.

    `snapshot` is the response object as of `snapshot_version` (the last lifecycle event);
    once the response is terminal it is the final object and equals the fold of the log.
    The columns from `updated_at` on, but for the versions and snapshot, are what no event
    records: when it was last written, the cancel flag (the time of the first request and
    its reason), the delete flag, and the lease.
    """

    id: str
    owner: str
    status: str
    model: str
    background: bool
    store: bool
    previous_response_id: str | None
    created_at: float
    updated_at: float
    version: int
    snapshot_version: int
    snapshot: bytes
    cancel_requested_at: float | None = None
    cancel_reason: CancelReason | None = None  # set with `cancel_requested_at`
    deleted_at: float | None = None
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    # The digest of the event at `version` (the stream's hash chain, domain/chain.py).
    head_digest: str | None = None

    @property
    def cancel_requested(self) -> bool:
        return self.cancel_requested_at is not None

    @property
    def deleted(self) -> bool:
        return self.deleted_at is not None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


# A tail's events in the batches they arrive in (`EventStore.subscribe_batches`).
Batches = AsyncGenerator[list[StoredEvent], None]


class EventStore(Protocol):
    """Reads of the log; the same contract on PostgreSQL and SQLite."""

    async def read(
        self, stream_id: str, after: int = -1, limit: int | None = None
    ) -> list[StoredEvent]:
        """Events of one stream with position > `after`, in order."""
        ...

    def subscribe(
        self, stream_id: str, after: int = -1, *, new: bool = False
    ) -> AsyncGenerator[StoredEvent, None]:
        """Every committed event with position > `after`, exactly once, in order, live;
        the iterator ends after the terminal event. `new`: the stream has no event yet
        and the tail is taken before its first append (which lets the store skip a read)."""
        ...

    def subscribe_batches(self, stream_id: str, after: int = -1, *, new: bool = False) -> Batches:
        """`subscribe`'s events in the batches they arrive in (a page read, the commits
        handed over), for a writer to the wire: one step a batch. An empty batch says the
        tail is idle: one comes at least every poll interval or so while nothing happens
        (and between the tries of a read that failed), so that its reader can send its
        keep-alives without a task of its own."""
        ...


class LogObserver(Protocol):
    """What the log writer reports after each flush (for metrics): the events it committed,
    how long the commit took, how many appends failed, and how many events wait."""

    def flushed(
        self, committed: Sequence[StoredEvent], seconds: float, failed: int, queued: int
    ) -> None: ...


class EventWriter(Protocol):
    """The write side: appends are group-committed with other streams' appends."""

    async def append(
        self,
        stream_id: str,
        expected_version: int,
        events: Sequence[AnyEvent],
        *,
        durable: bool = True,
        lease: bool = False,
    ) -> None:
        """Append `events` after position `expected_version` (-1 creates the stream).

        With `durable` the call returns once the events are committed, else once they are
        queued (it still waits when the stream's queue is full). A wrong expected version
        raises `Conflict` and writes nothing of that append; an append that follows a
        failed one on the same stream raises the same error.

        A stream created `in_progress` is leased to this process by the insert that creates
        it; `lease` asks the same for a queued (background) one this process will run, so
        that no other process's worker can claim it first. Ignored unless it creates.
        """
        ...

    def create(
        self, stream_id: str, events: Sequence[AnyEvent], *, lease: bool = False
    ) -> asyncio.Future[None]:
        """Queue a new stream's first events before returning, as `append(stream_id, -1,
        events, lease=lease)` would, and return the future of their commit, without a task
        to await it in (a create starts its generation while its first events commit:
        service/responses/create.py). A refusal known at once (the writer closed, the database
        unreachable, a stream this writer already carries) raises here."""
        ...


class ChainLink(msgspec.Struct, frozen=True, kw_only=True):
    """One response of a `previous_response_id` chain, as a continuation needs it: its
    status, its snapshot (the final object once it ended) and its request's hidden facts
    (the `facts` of its first event, `response.created`)."""

    response_id: str
    status: str
    previous_response_id: str | None
    snapshot: bytes
    request_facts: bytes | None
    erased: bool = False  # its content was erased (`resplog erase`): it cannot be continued


class ChainTip(msgspec.Struct, frozen=True, kw_only=True):
    """The newest link of a chain (None: `owner` cannot see it) and the database's
    chain-break count when it was read (None where it keeps none): the count grows with
    every delete, erasure and `gc` of responses, so a chain walked at one count is still
    whole at the same."""

    link: ChainLink | None
    breaks: int | None


class ResponseIndex(Protocol):
    """Queries and flags on the read model."""

    async def get(self, response_id: str) -> ResponseRow | None: ...

    async def chain(self, response_id: str, owner: str, limit: int) -> list[ChainLink]:
        """`response_id` and its ancestors by `previous_response_id`, newest first, in one
        query: at most `limit` of them, and only while each is visible to `owner` (as
        `visible` decides, in SQL); the walk stops before the first that is not (so the
        last link's `previous_response_id`, if set, names a response `owner` cannot see)."""
        ...

    async def chain_tip(self, response_id: str, owner: str) -> ChainTip:
        """`chain`'s first link alone, with the chain-break count, in one query."""
        ...

    async def visible(
        self, response_id: str, owner: str, *, snapshot: bool = True
    ) -> ResponseRow | None:
        """The row if `owner` may see it (theirs, stored, not deleted), else None; decided
        before the snapshot is read, so that "not yours" takes no longer than "no such id".
        `snapshot=False`: the row with an empty snapshot (not read), for a caller that
        only asks whether it may see the response."""
        ...

    async def mark_deleted(self, response_id: str) -> bool:
        """Hide the response from the API (its log stays, for audit)."""
        ...

    async def request_cancel(
        self, response_id: str, reason: CancelReason = CancelReason.CANCELLED_BY_USER
    ) -> bool:
        """Flag the response for cancellation with `reason` (the first request's reason is
        kept) and ring the cancel doorbell of the process that holds its lease, which stops
        it with the reason; a lost doorbell is made up for by its next renewal pass."""
        ...


class Claim(msgspec.Struct, frozen=True):
    """A response whose lease this process now holds. `cancel` is set (the reason) when a
    cancellation was requested before the claim: end it instead of generating."""

    response_id: str
    cancel: CancelReason | None = None


class Renewal(msgspec.Struct, frozen=True):
    """What a renewal pass learnt: the leases still ours (now extended), and which of those
    responses someone asked to cancel (id -> reason)."""

    held: frozenset[str]
    cancel: dict[str, CancelReason]


class Leases(Protocol):
    """One owner per running stream: a lease on its row (`owner`, an expiry) that the
    store's append guard enforces, so a writer whose lease was taken over cannot append."""

    owner: str

    async def claim(self, limit: int) -> list[Claim]:
        """Lease up to `limit` queued responses that nobody holds, oldest first; concurrent
        claimers never get the same one."""
        ...

    async def acquire(self, response_id: str) -> Claim | None:
        """Lease one unfinished response if nobody holds it, its lease expired, or it is
        already ours; None if another live process holds it (or it ended)."""
        ...

    async def renew(self, response_ids: Sequence[str]) -> Renewal:
        """Extend the leases of these responses in one pass; those not in `held` are lost."""
        ...

    async def expired(self, limit: int) -> list[str]:
        """Responses in progress whose lease expired: their process is gone."""
        ...


# (response id, reason) pairs, or None for "re-check everything you hold".
CancelBell = Callable[[list[tuple[str, CancelReason]] | None], None]


class Doorbells(Protocol):
    """Wake-ups across processes; they may be lost, so their listeners also poll."""

    async def ring_work(self) -> None:
        """Tell idle workers (of every process) that a response is queued."""
        ...

    def listen(self, work: Callable[[], None], cancel: CancelBell) -> None:
        """Call `work` when work may be queued, `cancel` when responses this process
        leases were asked to stop."""
        ...


class ToolError(Exception):
    """An MCP server did not give a result: `error` is the failed call's `error` object
    (domain/mcp.py), in words safe to show the client (no headers)."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(str(error))
        self.error = error


class ToolServers(Protocol):
    """The MCP servers of `mcp` tools (adapters/tools/mcp.py, over the `mcp` package's
    streamable HTTP client). Both raise `ToolError`; timeouts are the caller's."""

    async def list_tools(self, url: str, headers: dict[str, str]) -> list[dict[str, Any]]:
        """The server's tools, each `{name, input_schema, description, annotations}`."""
        ...

    async def call_tool(
        self, url: str, headers: dict[str, str], name: str, arguments: dict[str, Any]
    ) -> str:
        """The tool's result as text."""
        ...


class Engine(Protocol):
    """A generation engine: renders a `Prompt` and yields semantic deltas.

    The iterator ends with exactly one `Finished`, or raises `EngineError`. Closing it early
    (`aclose()`) aborts the generation on the engine. Deltas come as the engine parses them;
    how many become one logged event is the caller's business (the runner batches them).
    """

    name: str
    # What its prompts may hold beside text: "image", "file" (a text-only engine: none).
    media: frozenset[str]

    def models(self) -> list[str]:
        """Model names this engine serves."""
        ...

    def serves(self, model: str) -> bool:
        """Whether a request for `model` may run on this engine."""
        ...

    def generate(self, prompt: Prompt) -> AsyncGenerator[AnyDelta, None]: ...

    async def count_tokens(self, prompt: Prompt) -> int:
        """The prompt tokens a generation of `prompt` would take, as the engine counts them
        (its usage's `input_tokens`); `EngineError` with code `tokens_uncountable` if it
        has no way to count."""
        ...

    def context_window(self, model: str) -> int | None:
        """The most tokens `model`'s prompt and answer may hold together, where the engine
        says (sglang's `context_length`, vLLM's `max_model_len`); None if unknown."""
        ...

    async def ready(self) -> bool:
        """Whether the engine answers."""
        ...

    async def aclose(self) -> None:
        """Release the engine's connections (the process closes it once, at exit)."""
        ...


class ConversationRow(msgspec.Struct, frozen=True, kw_only=True):
    """One conversation's read-model row."""

    id: str
    owner: str
    created_at: float
    updated_at: float
    version: int
    metadata: dict[str, str]
    deleted_at: float | None = None


class ConversationItems(msgspec.Struct, frozen=True, kw_only=True):
    """A page of a conversation's items, and whether more follow it."""

    items: list[ConversationItem]
    has_more: bool


class Conversations(Protocol):
    """Conversation streams and their read model; every change is an event of the
    conversation's stream and its row updates, in one transaction."""

    async def create(
        self,
        conversation: ConversationObject,
        owner: str,
        items: list[ConversationItem],
        now: float,
    ) -> None: ...

    async def get(self, conversation_id: str) -> ConversationRow | None:
        """The row, deleted or not (the use-case decides who sees it)."""
        ...

    async def update(self, conversation_id: str, metadata: dict[str, str], now: float) -> bool:
        """False if the conversation is gone."""
        ...

    async def delete(self, conversation_id: str, now: float) -> bool: ...

    async def add_items(
        self, conversation_id: str, items: list[ConversationItem], now: float
    ) -> bool:
        """Add them as one event; False if the conversation is gone. Raises
        `DuplicateItems`, with nothing written, if the conversation has or had (deleted) an
        item of one of their ids: checked in the write's own transaction, so two requests
        that add the same id at once cannot both succeed."""
        ...

    async def items(
        self,
        conversation_id: str,
        *,
        after: str | None = None,
        limit: int | None = None,
        order: str = "asc",
        listing: bool = False,
    ) -> ConversationItems:
        """The visible items in the conversation's order (`desc`: newest first), after the
        item `after` (which must exist: else none). `listing`: a page for a client, which
        the store may read on a standby that holds every commit made before it was asked
        for (not a prompt's read, which waits for no standby)."""
        ...

    async def item(self, conversation_id: str, item_id: str) -> ConversationItem | None:
        """One visible item by its id (None: not in the conversation, or deleted), read by
        itself however many items the conversation has."""
        ...

    async def delete_item(self, conversation_id: str, item_id: str, now: float) -> bool: ...


class PromptVersion(msgspec.Struct, frozen=True, kw_only=True):
    """One version of a prompt template (domain/templates.py), with whose it is."""

    id: str
    owner: str
    version: int
    created_at: float  # when this version was added
    template: PromptTemplate


class PromptSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A prompt template's row: its owner, its latest version, when it began and when its
    latest version was added."""

    id: str
    owner: str
    version: int
    created_at: float
    updated_at: float


class Prompts(Protocol):
    """Prompt templates, each a stream of versions in the log (`pmpt_…`) with a row of its
    own; the same on PostgreSQL and SQLite."""

    async def add(
        self, prompt_id: str, owner: str, template: PromptTemplate, now: float
    ) -> int | None:
        """Append `template` as the next version of `prompt_id` (its first creates it) and
        return that version; None, with nothing written, if another owner has the id."""
        ...

    async def get(self, prompt_id: str) -> PromptSummary | None: ...

    async def version(self, prompt_id: str, version: int) -> PromptVersion | None:
        """That version (1 is the first), or None if the template has none such."""
        ...

    async def summaries(self, owner: str | None, limit: int) -> list[PromptSummary]:
        """Templates newest first (by their latest version), only `owner`'s if given."""
        ...


class ApiKey(msgspec.Struct, frozen=True, kw_only=True):
    """One API key as stored: never the secret itself, only its hash (kept by the store)."""

    id: str
    owner: str
    prefix: str  # the secret's first characters, to recognise a key in lists
    name: str | None
    created_at: float
    revoked_at: float | None = None


class ApiKeyStore(Protocol):
    """The API keys table."""

    async def add(self, key: ApiKey, key_hash: str) -> None: ...

    async def find(self, key_hash: str) -> ApiKey | None:
        """The key whose secret hashes to `key_hash` (revoked or not)."""
        ...

    async def get(self, key_id: str) -> ApiKey | None: ...

    async def all(self) -> list[ApiKey]:
        """Every key, oldest first."""
        ...

    async def revoke(self, key_id: str, at: float) -> bool:
        """Mark the key revoked; False if there is no such key or it already was."""
        ...


class Database(Protocol):
    """The database as a whole (the store and its writer): whether it can serve, and
    closing it, which commits what the writer still holds first."""

    async def ready(self) -> str | None:
        """None when reachable and migrated, else why not (one line)."""
        ...

    async def aclose(self) -> None: ...


# --- the audit and admin reads and writes (`resplog` export, import, verify, gc, …; /audit) --

Key = tuple[float, str]  # a response row's place in the scans' order: (created_at, id)


class Selection(msgspec.Struct, frozen=True, kw_only=True):
    """Which responses: created in [since, until), of an owner, in some statuses; and a
    slice of the scan's order, after `after` up to and including `through` (`StreamScan.cuts`
    makes them, for a scan in parallel parts)."""

    owner: str | None = None
    since: float | None = None
    until: float | None = None
    statuses: tuple[str, ...] | None = None
    after: Key | None = None
    through: Key | None = None


class Head(msgspec.Struct, frozen=True):
    """A stream begins: its id and read-model row (None: events with no row)."""

    stream_id: str
    record: ResponseRow | None


class ResponsePage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of rows, newest first; pass `rows[-1].id` as `after` for the next one."""

    rows: list[ResponseRow]
    has_more: bool


class LogReader(Protocol):
    """One response's row and log for an auditor, and the read model's rows, any owner's."""

    async def record(self, response_id: str) -> ResponseRow | None: ...

    def events(self, stream_id: str, after: int = -1) -> AsyncIterator[StoredEvent]:
        """One stream's events after `after`, in order, a page at a time."""
        ...

    async def existing(self, ids: Sequence[str]) -> set[str]:
        """Which of `ids` have a read-model row (a response's or a conversation's) or any
        event."""
        ...

    async def page(
        self,
        *,
        owner: str | None = None,
        status: Sequence[str] | None = None,
        model: str | None = None,
        since: float | None = None,
        until: float | None = None,
        include_deleted: bool = False,
        root: str | None = None,
        end_reason: str | None = None,
        after: str | None = None,
        limit: int = 20,
    ) -> ResponsePage:
        """Rows newest first, filtered (`root`: that response and those that continue it;
        `end_reason`: those whose terminal event records it), after the row `after`."""
        ...


class StreamScan(Protocol):
    """The whole log in the scans' order, in memory bounded by pages (verify, export)."""

    async def count(self, selection: Selection) -> int: ...

    async def cuts(self, selection: Selection, parts: int) -> list[Key]:
        """Up to `parts - 1` keys that split the selected streams into slices of about as
        many events, never an empty one."""
        ...

    def streams(self, selection: Selection) -> AsyncIterator[Head | StoredEvent]:
        """Each selected response's `Head`, then its events in order, oldest first."""
        ...

    def streams_of(self, ids: Sequence[str]) -> AsyncIterator[Head | StoredEvent]:
        """The same for the given ids (a missing row gives a `Head` without one)."""
        ...

    def orphans(self) -> AsyncIterator[Head | StoredEvent]:
        """Response streams with events but no read-model row."""
        ...


class ItemRow(msgspec.Struct, frozen=True, kw_only=True):
    """A `conversation_items` row as the store writes it (adapters/store/conversations.py)."""

    position: int
    seq: int
    item_id: str
    data: str
    response_id: str | None = None
    deleted_at: float | None = None


class Rebuilt(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation's rows as its events make them."""

    row: ConversationRow
    items: list[ItemRow]


class Imported(msgspec.Struct, frozen=True, kw_only=True):
    """One response of an export file, checked: its rebuilt row and its events."""

    record: ResponseRow
    events: list[StoredEvent]
    line: int  # where its response line is, for messages


class ImportedConversation(msgspec.Struct, frozen=True, kw_only=True):
    """One conversation of an export file, checked: its rebuilt rows and its events."""

    rebuilt: Rebuilt
    events: list[StoredEvent]
    line: int


class Archive(Protocol):
    """Where an imported log goes: whole streams, none of which may be there already."""

    async def existing(self, ids: Sequence[str]) -> set[str]: ...

    async def insert(self, streams: Sequence[Imported | ImportedConversation]) -> None:
        """Insert the streams in one transaction; `Conflict` (and nothing written) if any
        of them exists by now."""
        ...


class ConversationSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation as the admin list shows it."""

    id: str
    owner: str
    created_at: float
    items: int  # not deleted
    deleted: bool


class AuditedItem(msgspec.Struct, frozen=True, kw_only=True):
    """One item of a conversation for an auditor: deleted ones too, with their source."""

    item: ConversationItem
    response_id: str | None
    deleted: bool


class ConversationAudit(Protocol):
    """Conversations for an auditor: every owner's, deleted ones and deleted items too."""

    async def get(self, conversation_id: str) -> ConversationRow | None: ...

    async def summaries(
        self,
        owner: str | None,
        limit: int,
        *,
        since: float | None = None,
        until: float | None = None,
        after: str | None = None,
    ) -> list[ConversationSummary]:
        """Newest first, with their live item counts, after the conversation `after`."""
        ...

    async def ids(self) -> list[str]:
        """Every conversation's id."""
        ...

    async def audited_items(self, conversation_id: str) -> list[AuditedItem]:
        """Every item in the conversation's order, deleted ones included."""
        ...


class GcRule(msgspec.Struct, frozen=True, kw_only=True):
    """What `gc` deletes: ended responses that were not stored, were created before
    `cutoff`, or (with `deleted`) were deleted through the API. The responses of `days`
    (those with a partition of their own) never go by age one by one: their whole day goes
    at once (`Collector.drop_day`) when it is all past the cutoff."""

    unstored: bool = True
    cutoff: float | None = None  # unix seconds; None: no age limit
    deleted: bool = False
    days: frozenset[int] = frozenset()


class Candidate(msgspec.Struct, frozen=True, kw_only=True):
    """A response `gc` would delete, and why."""

    id: str
    status: str
    created_at: float
    events: int
    why: str


class Day(msgspec.Struct, frozen=True, kw_only=True):
    """A day's partition as `gc` sees it: its responses, those still running, its events."""

    day: int  # a unix day: the seconds since the epoch // 86,400
    responses: int
    running: int
    events: int

    @property
    def start(self) -> float:
        return self.day * 86400.0


class Collector(Protocol):
    """Deleting ended responses, events and row together: in batches, or a whole day's
    partition at once (PostgreSQL). What has not ended is never selected nor deleted."""

    def candidates(self, rule: GcRule, page: int) -> AsyncIterator[list[Candidate]]:
        """What `rule` selects, oldest first, a page at a time (nothing is deleted)."""
        ...

    async def collect(self, rule: GcRule, ids: Sequence[str]) -> tuple[int, int]:
        """Delete those of `ids` the rule still selects; (responses, events) deleted."""
        ...

    async def partitioned_days(self) -> frozenset[int]: ...

    async def expired_days(self, cutoff: float) -> list[Day]:
        """The days whose partition ends before `cutoff`, oldest first."""
        ...

    async def drop_day(self, day: int) -> Day | None:
        """Delete the day's responses and its partition; None if one is still running."""
        ...


class DeletedConversation(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    deleted_at: float
    events: int


class Leftovers(Protocol):
    """What `gc` deletes besides responses: conversations deleted through the API, and
    the blobs that nothing refers to any more."""

    async def deleted_conversations(self) -> list[DeletedConversation]: ...

    async def collect_conversation(self, conversation_id: str) -> int:
        """Delete a deleted conversation's rows and events; the events deleted."""
        ...

    async def sweep_blobs(self, now: float) -> int:
        """Delete the blobs no event refers to (past a grace period); how many."""
        ...


# --- the hash chain, its checkpoints and erasure (service/audit/chain.py, erasing.py) -------


class ChainRow(msgspec.Struct, frozen=True):
    """One event as the chain sees it: its bytes as a reader receives them (blobs put
    back), its stored digest, and the content digest kept when it was erased."""

    stream_id: str
    position: int
    type: str
    data: bytes
    facts: bytes | None
    digest: str | None
    content_digest: str | None = None  # set only on an erased event


class ChainHead(msgspec.Struct, frozen=True):
    """A stream's row as the chain sees it: its last position and the head digest there."""

    stream_id: str
    version: int
    head_digest: str | None


class Erasure(msgspec.Struct, frozen=True, kw_only=True):
    stream_id: str
    erased_at: float
    reason: str


class SavedCheckpoint(msgspec.Struct, frozen=True, kw_only=True):
    number: int
    created_at: float
    body: bytes  # the checkpoint's file


class Ledger(Protocol):
    """The chain's reads (every event in stream order, every row's head), the checkpoint
    table, and erasure."""

    async def heads(self) -> list[ChainHead]:
        """Every response's and conversation's row."""
        ...

    def rows(self, stream_ids: Sequence[str] | None = None) -> AsyncIterator[list[ChainRow]]:
        """Every event (or those of the given streams) in (stream, position) order, a page
        at a time."""
        ...

    async def save_checkpoint(self, created_at: float, root: str, body: bytes) -> int: ...

    async def latest_checkpoint(self) -> SavedCheckpoint | None: ...

    async def erasures(self, stream_ids: Sequence[str] | None = None) -> list[Erasure]: ...

    async def erase(
        self,
        stream_id: str,
        events: Sequence[tuple[int, bytes, bytes | None, str]],
        erasure: Erasure,
        snapshot: bytes | None = None,
        items: Sequence[tuple[str, bytes]] = (),
        metadata: bytes | None = None,
    ) -> None:
        """Replace each (position, data, facts, content digest) of the stream, a response's
        snapshot, a conversation's items (by id) and metadata, and record the erasure, in
        one transaction; then delete the blobs nothing refers to any more."""
        ...
