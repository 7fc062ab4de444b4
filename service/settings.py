"""Server settings: one frozen struct, filled by the CLI from flags and `RESPLOG_*` env."""

from __future__ import annotations

from typing import Literal

import msgspec

from domain.events import ReasoningEvents
from service.access.admission import AccessPolicy
from service.wire.limits import Limits

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///resplog.db"


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    database_url: str = DEFAULT_DATABASE_URL
    host: str = "127.0.0.1"
    port: int = 8000
    engine: str = "scripted"
    engine_url: str | None = None
    engine_api_key: str | None = None
    engine_admin_key: str | None = None  # sglang's --admin-api-key, for aborts; a secret
    engine_extra_body: dict[str, object] = msgspec.field(default_factory=dict)
    model: str | None = None
    scripted_delay_ms: float = 20.0
    scripted_tokens: int | None = None
    # The most a request's metadata may ask of the scripted engine (larger values are clamped).
    scripted_max_tokens: int = 100_000
    scripted_max_delay_ms: float = 10_000.0
    context_window: int | None = None  # tokens; the engine's own window applies too
    # The longest reasoning summary generated for `reasoning.summary` (0: none are).
    reasoning_summary_tokens: int = 256
    max_body_bytes: int = 8 * 1024 * 1024
    flush_interval_ms: float = 5.0
    keepalive_s: float = 15.0
    shutdown_grace_s: float = 10.0
    workers: int = 64  # background responses this process generates at once (0: none)
    lease_ttl_s: float = 15.0  # a generation's lease lasts this long unless renewed
    claim_poll_s: float = 1.0  # idle workers look for queued work at least this often
    cancel_wait_s: float = 10.0  # a cancel of a response running elsewhere waits this long
    # Keys that seal reasoning for stateless clients (service/reasoning/sealing.py); a secret: never
    # logged. None: a key of this process's own.
    reasoning_key: str | None = None
    # `mcp` tools (service/tools/mcploop.py): run or refused, and the bounds of a loop.
    mcp_tools: Literal["on", "off"] = "on"
    mcp_call_timeout_s: float = 30.0
    mcp_loop_timeout_s: float = 300.0
    mcp_max_output_bytes: int = 65536
    mcp_max_list_bytes: int = 1048576
    # Tools (`server_label:name`) whose in-flight call a takeover runs once more.
    mcp_idempotent_tools: frozenset[str] = frozenset()
    # Where a request's MCP servers may be (adapters/tools/hosts.py): `public` addresses,
    # networks, host names, or `any`.
    mcp_hosts: str = "public"
    # Webhooks (service/webhooks/delivery.py): where endpoints may be (the rule of
    # `mcp_hosts`), the first retry's delay, how long a delivery is retried, one attempt's
    # bound, how long an endpoint may fail before it is disabled, attempts in flight per
    # endpoint in this process.
    webhook_hosts: str = "public"
    webhook_backoff_s: float = 5.0
    webhook_max_age_h: float = 72.0
    webhook_timeout_s: float = 10.0
    webhook_disable_after_h: float = 72.0
    webhook_concurrency: int = 16
    webhook_poll_s: float = 1.0  # how often due deliveries are looked for
    # The MCP server that runs gpt-oss's built-ins (`browser.*`, `python`); sglang only.
    tool_server: str | None = None
    # PostgreSQL: seconds to connect, and the most one statement may take (a frozen
    # database is then a quick 503, not a hang).
    db_connect_timeout_s: float = 5.0
    db_statement_timeout_s: float = 10.0
    # PostgreSQL: a URL straight to the database for the LISTEN doorbells when
    # `database_url` is a transaction pooler's (adapters/store/pooler.py).
    session_database_url: str | None = None
    # PostgreSQL: a hot standby that reads of ended streams go to (adapters/store/replica.py).
    replica_database_url: str | None = None
    # `openai`: `response.reasoning_text.*` (what the official SDKs parse);
    # `open_responses`: the Open Responses schema's `response.reasoning.*`.
    reasoning_events: ReasoningEvents = "openai"
    limits: Limits = msgspec.field(default_factory=Limits)
    access: AccessPolicy = msgspec.field(default_factory=AccessPolicy)
    # A response body write that cannot be handed to the socket within this many seconds
    # (a client that stopped reading) ends the response.
    send_timeout_s: float = 30.0
    # GET /metrics: who may scrape it (adapters/metrics); the key is a secret, never logged.
    metrics: Literal["open", "key", "off"] = "off"
    metrics_key: str | None = None
    # OpenTelemetry traces over OTLP/HTTP to this collector (its base URL); None: off unless
    # the standard OTEL_EXPORTER_OTLP_ENDPOINT is set (adapters/otel, the `otel` extra).
    otel_endpoint: str | None = None
    # GET /audit, the read-only web audit view (adapters/auditview); the key is a secret.
    audit_view: Literal["open", "key", "off"] = "off"
    audit_key: str | None = None
    # Host names `/metrics` and `/audit` answer to besides the loopback's and addresses
    # (adapters/http/hosts.py): the names a proxy or a browser reaches this server by.
    public_hosts: tuple[str, ...] = ()
    # An HTTP connection idle between requests this long is closed: longer than the clients'
    # own idle limits (the OpenAI SDKs' 5 s, a load balancer's 60 s), so that they close
    # first; a server closing at their limit races their next request on it, which is then
    # reset (adapters/cli/protocol.py).
    keep_alive_s: int = 75
    # WebSocket mode: a connection with no message and no response streaming for this long
    # is closed (0: never); uvicorn pings every `ws_ping_interval_s` and drops a peer that
    # does not answer within `ws_ping_timeout_s` (0: no pings).
    ws_idle_timeout_s: float = 600.0
    ws_ping_interval_s: float = 20.0
    ws_ping_timeout_s: float = 20.0
    # The bytes of `response.create` messages a connection, and a key across all its
    # connections, may hold received and not yet answered to their end (0: no bound);
    # a message past either is refused with an error event.
    ws_max_queued_bytes: int = 32 * 1024 * 1024
    ws_max_queued_bytes_per_key: int = 256 * 1024 * 1024
