"""Options of the commands that generate (`serve`, `worker`): the engine, the log writer,
background slots, leases and shutdown; and the `Settings` they make."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from adapters.cli.common import checked_optional_url
from adapters.sealing import AesGcmSealer
from service.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])

_OPTIONS = [
    click.option(
        "--engine",
        envvar="RESPLOG_ENGINE",
        default="scripted",
        show_default=True,
        type=click.Choice(["scripted", "sglang", "openai-chat"]),
        help="Generation engine; `scripted` plays back a deterministic script (no GPU).",
    ),
    click.option(
        "--engine-url",
        envvar="RESPLOG_ENGINE_URL",
        default=None,
        help="Base URL of the engine server (sglang, or a /v1/chat/completions server).",
    ),
    click.option("--engine-api-key", envvar="RESPLOG_ENGINE_API_KEY", default=None),
    click.option(
        "--engine-admin-key",
        envvar="RESPLOG_ENGINE_ADMIN_KEY",
        default=None,
        help="sglang engine: its --admin-api-key, sent on /abort_request only (with an admin "
        "key sglang refuses aborts without it). A secret: prefer the environment.",
    ),
    click.option(
        "--engine-extra-body",
        envvar="RESPLOG_ENGINE_EXTRA_BODY",
        default=None,
        metavar="JSON",
        help="openai-chat engine: JSON object merged into every upstream request "
        "(e.g. '{\"ignore_eos\": true}' for vLLM).",
    ),
    click.option(
        "--model",
        envvar="RESPLOG_MODEL",
        default=None,
        help="Model name to serve (default: what the engine reports).",
    ),
    click.option(
        "--scripted-delay-ms",
        envvar="RESPLOG_SCRIPTED_DELAY_MS",
        default=20.0,
        show_default=True,
        type=float,
        help="Scripted engine: pause between deltas.",
    ),
    click.option(
        "--scripted-tokens",
        envvar="RESPLOG_SCRIPTED_TOKENS",
        default=None,
        type=int,
        help="Scripted engine: number of answer tokens (default: the script's own).",
    ),
    click.option(
        "--scripted-max-tokens",
        envvar="RESPLOG_SCRIPTED_MAX_TOKENS",
        default=100_000,
        show_default=True,
        type=click.IntRange(min=1),
        help="Scripted engine: the most answer tokens a request's `scripted_tokens` "
        "metadata gets (a larger value is clamped).",
    ),
    click.option(
        "--scripted-max-delay-ms",
        envvar="RESPLOG_SCRIPTED_MAX_DELAY_MS",
        default=10_000.0,
        show_default=True,
        type=click.FloatRange(min=0),
        help="Scripted engine: the longest pause between deltas a request's "
        "`scripted_delay_ms` metadata gets (a larger value is clamped).",
    ),
    click.option(
        "--context-window",
        envvar="RESPLOG_CONTEXT_WINDOW",
        default=None,
        type=click.IntRange(min=1),
        help="Tokens a prompt may hold (default: what the engine reports; the smaller of the "
        "two applies). A longer prompt is 400 context_length_exceeded, or cut with "
        "truncation=auto.",
    ),
    click.option(
        "--reasoning-summary-tokens",
        envvar="RESPLOG_REASONING_SUMMARY_TOKENS",
        default=256,
        show_default=True,
        type=click.IntRange(min=0),
        help="The longest summary generated for a reasoning item when a request asks "
        "reasoning.summary (a second, short generation); 0: none (the setting is echoed "
        "and ignored).",
    ),
    click.option(
        "--flush-interval-ms",
        envvar="RESPLOG_FLUSH_INTERVAL_MS",
        default=5.0,
        show_default=True,
        type=float,
        help="Group-commit interval of the log writer.",
    ),
    click.option(
        "--workers",
        envvar="RESPLOG_WORKERS",
        default=64,
        show_default=True,
        type=click.IntRange(min=0),
        help="Background responses this process generates at once; 0: none (an API-only "
        "replica: its background responses wait for another process's workers).",
    ),
    click.option(
        "--lease-ttl-s",
        envvar="RESPLOG_LEASE_TTL_S",
        default=15.0,
        show_default=True,
        type=click.FloatRange(min=0.5),
        help="A generation's lease on its stream lasts this long unless renewed; a crashed "
        "process's responses are ended about this long after it died.",
    ),
    click.option(
        "--session-database-url",
        envvar="RESPLOG_SESSION_DATABASE_URL",
        default=None,
        metavar="URL",
        callback=checked_optional_url,
        help="PostgreSQL: a URL straight to the database for what needs a session (the "
        "LISTEN doorbells), when --database-url is a pooler's in transaction mode "
        "(PgBouncer); without it, live tails poll (docs/guides/deployment.md).",
    ),
    click.option(
        "--replica-database-url",
        envvar="RESPLOG_REPLICA_DATABASE_URL",
        default=None,
        metavar="URL",
        callback=checked_optional_url,
        help="PostgreSQL: a hot standby that reads of ended responses' events go to "
        "(replays, /events), each on the primary instead where the standby has not "
        "replayed the response's end; and listings (a conversation's items, the audit "
        "view), each once the standby has replayed the primary's WAL up to where it was "
        "when asked (docs/guides/high-availability.md).",
    ),
    click.option(
        "--db-connect-timeout-s",
        envvar="RESPLOG_DB_CONNECT_TIMEOUT_S",
        default=5.0,
        show_default=True,
        type=click.FloatRange(min=0.1),
        help="PostgreSQL: seconds to open a connection or wait for a pooled one; then 503.",
    ),
    click.option(
        "--db-statement-timeout-s",
        envvar="RESPLOG_DB_STATEMENT_TIMEOUT_S",
        default=10.0,
        show_default=True,
        type=click.FloatRange(min=0.1),
        help="PostgreSQL: the most one statement may take before the request gets 503 (a "
        "frozen or partitioned database); the log writer retries its flushes.",
    ),
    click.option(
        "--reasoning-key",
        envvar="RESPLOG_REASONING_KEY",
        default=None,
        help="Base64 32-byte keys, comma-separated, that seal reasoning for clients asking "
        "include=['reasoning.encrypted_content'] (the first seals, all open; the same on "
        "every process). Default: a key of this process's own. Prefer the environment "
        "variable: a flag shows in the process list.",
    ),
    click.option(
        "--mcp",
        "mcp_tools",
        envvar="RESPLOG_MCP",
        type=click.Choice(["on", "off"]),
        default="on",
        show_default=True,
        help="Run `mcp` tools: list the servers' tools and run the model's calls in a "
        "durable loop (docs/mcp.md); off: a request with an `mcp` tool is refused.",
    ),
    click.option(
        "--mcp-call-timeout-s",
        envvar="RESPLOG_MCP_CALL_TIMEOUT_S",
        default=30.0,
        show_default=True,
        type=click.FloatRange(min=0.01),
        help="The most one MCP call (or tool listing) may take; then it is a failed call.",
    ),
    click.option(
        "--mcp-loop-timeout-s",
        envvar="RESPLOG_MCP_LOOP_TIMEOUT_S",
        default=300.0,
        show_default=True,
        type=click.FloatRange(min=0.01),
        help="The most a response's tool loop may take in one process; then the response "
        "fails (tool_loop_timeout).",
    ),
    click.option(
        "--mcp-max-output-bytes",
        envvar="RESPLOG_MCP_MAX_OUTPUT_BYTES",
        default=65536,
        show_default=True,
        type=click.IntRange(min=1),
        help="The largest MCP call output kept and shown to the model; a larger one is a "
        "failed call.",
    ),
    click.option(
        "--mcp-max-list-bytes",
        envvar="RESPLOG_MCP_MAX_LIST_BYTES",
        default=1048576,
        show_default=True,
        type=click.IntRange(min=1),
        help="The largest tool list of an MCP server (its tools as JSON) kept and shown to "
        "the model; a larger one is a failed listing.",
    ),
    click.option(
        "--mcp-idempotent-tools",
        envvar="RESPLOG_MCP_IDEMPOTENT_TOOLS",
        default="",
        metavar="LABEL:TOOL,...",
        help="Tools whose call, in flight when the process running it died, the process "
        "taking the loop over runs once more (server_label:tool; the built-ins are "
        "tool_server:browser.search, tool_server:python, ...); any other such call is "
        "recorded failed.",
    ),
    click.option(
        "--mcp-hosts",
        envvar="RESPLOG_MCP_HOSTS",
        default="public",
        show_default=True,
        metavar="ENTRY,...",
        help="Where the MCP servers a request names, and the image URLs it hands to an "
        "openai-chat upstream, may be: public (hosts whose every "
        "address is a public one), networks (10.0.0.0/8), host names (mcp.internal), "
        "domains (.corp.example), or any (no rule). A server elsewhere is a failed "
        "listing or call (docs/mcp.md).",
    ),
    click.option(
        "--webhook-hosts",
        envvar="RESPLOG_WEBHOOK_HOSTS",
        default="public",
        show_default=True,
        metavar="ENTRY,...",
        help="Where webhook endpoints may be, as --mcp-hosts says (public, networks, host "
        "names, domains, or any); an endpoint elsewhere is a failed attempt "
        "(docs/webhooks.md).",
    ),
    click.option(
        "--webhook-backoff-s",
        envvar="RESPLOG_WEBHOOK_BACKOFF_S",
        default=5.0,
        show_default=True,
        type=click.FloatRange(min=0.001),
        help="Webhooks: the wait before the first retry; each next one doubles (with jitter, "
        "at most an hour).",
    ),
    click.option(
        "--webhook-max-age-h",
        envvar="RESPLOG_WEBHOOK_MAX_AGE_H",
        default=72.0,
        show_default=True,
        type=click.FloatRange(min=0),
        help="Webhooks: a delivery is retried until it is this old, then given up (expired).",
    ),
    click.option(
        "--webhook-timeout-s",
        envvar="RESPLOG_WEBHOOK_TIMEOUT_S",
        default=10.0,
        show_default=True,
        type=click.FloatRange(min=0.01),
        help="Webhooks: the most one attempt (connect, send, answer) may take.",
    ),
    click.option(
        "--webhook-disable-after-h",
        envvar="RESPLOG_WEBHOOK_DISABLE_AFTER_H",
        default=72.0,
        show_default=True,
        type=click.FloatRange(min=0),
        help="Webhooks: an endpoint whose every attempt failed for this long is disabled "
        "(with a record saying why) until `resplog webhooks enable`.",
    ),
    click.option(
        "--webhook-concurrency",
        envvar="RESPLOG_WEBHOOK_CONCURRENCY",
        default=16,
        show_default=True,
        type=click.IntRange(min=1),
        help="Webhooks: attempts in flight at once to one endpoint, per process.",
    ),
    click.option(
        "--webhook-poll-s",
        envvar="RESPLOG_WEBHOOK_POLL_S",
        default=1.0,
        show_default=True,
        type=click.FloatRange(min=0.01),
        help="Webhooks: how often each process looks for due deliveries (a delivery waits "
        "up to this long after its response ends, or its retry falls due).",
    ),
    click.option(
        "--tool-server",
        envvar="RESPLOG_TOOL_SERVER",
        default=None,
        metavar="URL",
        help="sglang engine: an MCP server (streamable HTTP) offering browser.search, "
        "browser.open, browser.find and python: gpt-oss's built-ins, offered for a "
        "request's web_search and code_interpreter tools (docs/mcp.md).",
    ),
    click.option(
        "--shutdown-grace-s",
        envvar="RESPLOG_SHUTDOWN_GRACE_S",
        default=10.0,
        show_default=True,
        type=float,
        help="On SIGTERM, how long running generations may finish before they are ended "
        "as failed (server_shutdown).",
    ),
]


def generation_options(func: F) -> F:
    for option in reversed(_OPTIONS):
        func = option(func)
    return func


def generation_settings(database_url: str, **options: Any) -> Settings:
    """`Settings` from `generation_options` (plus any other `Settings` fields given)."""
    extra = options.pop("engine_extra_body", None)
    idempotent = _idempotent(options.pop("mcp_idempotent_tools", "") or "")
    if options.get("tool_server") and options.get("engine") != "sglang":
        raise click.BadParameter(
            "gpt-oss's built-in tools need the sglang engine", param_hint="--tool-server"
        )
    from adapters.tools.hosts import HostPolicy  # here: it loads the `mcp` package

    try:
        HostPolicy.parse(options.get("mcp_hosts") or "public")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--mcp-hosts") from exc
    try:
        HostPolicy.parse(options.get("webhook_hosts") or "public")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--webhook-hosts") from exc
    try:
        AesGcmSealer.from_setting(options.get("reasoning_key"))
    except ValueError as exc:  # never echo the value: it is a secret
        raise click.BadParameter(
            "expected base64 keys of 32 bytes, comma-separated", param_hint="--reasoning-key"
        ) from exc
    return Settings(
        database_url=database_url,
        engine_extra_body=_json_object("--engine-extra-body", extra),
        mcp_idempotent_tools=idempotent,
        **options,
    )


def _idempotent(text: str) -> frozenset[str]:
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    for name in names:
        label, _, tool = name.partition(":")
        if not label or not tool:
            raise click.BadParameter(
                f"{name!r} is not server_label:tool", param_hint="--mcp-idempotent-tools"
            )
    return names


def _json_object(flag: str, text: str | None) -> dict[str, object]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=flag) from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint=flag)
    return value
