"""`serve`'s options for who may call and how much: `--auth`, the per-key quotas, the request
limits (one flag per `Limits` field) and the send deadline; and the rule that `--auth none`
needs a loopback bind."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import click
import msgspec

from adapters.cli.common import log
from domain.errors import ResplogError
from service.access.admission import AccessPolicy
from service.ports import ApiKeyStore
from service.wire.limits import Limits

F = TypeVar("F", bound=Callable[..., Any])

_LIMIT_HELP = {
    "max_input_items": "Most input items in one request.",
    "max_text_chars": "Longest text part, instructions or tool description (characters).",
    "max_tools": "Most tools in one request.",
    "max_tool_schema_bytes": "Largest JSON schema of one tool's parameters (bytes).",
    "max_output_tokens": "Highest max_output_tokens a request may ask for.",
    "max_metadata_pairs": "Most metadata key-value pairs.",
    "max_metadata_key_chars": "Longest metadata key (characters).",
    "max_metadata_value_chars": "Longest metadata value (characters).",
    "max_json_depth": "Deepest nesting of arrays and objects in a request body.",
    "max_file_bytes": "Largest image or file part, as its data URL (bytes).",
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _env(name: str) -> str:
    return "RESPLOG_" + name.upper()


def _limit_options(func: F) -> F:
    for field in reversed(msgspec.structs.fields(Limits)):
        if field.type is not int:
            continue  # a policy, not a number: its own option in `access_options`
        func = click.option(
            _flag(field.name),
            field.name,
            envvar=_env(field.name),
            default=field.default,
            show_default=True,
            type=click.IntRange(min=1),
            help=_LIMIT_HELP[field.name],
        )(func)
    return func


# `serve`'s and `worker`'s alike: who may read the metrics page.
_METRICS_OPTIONS = [
    click.option(
        "--metrics",
        envvar="RESPLOG_METRICS",
        type=click.Choice(["auto", "open", "key", "off"]),
        default="auto",
        show_default=True,
        help="GET /metrics (Prometheus): open, key (Authorization: Bearer "
        "<--metrics-key>), or off; auto: open on a loopback bind, key when a metrics "
        "key is set, else off.",
    ),
    click.option(
        "--metrics-key",
        envvar="RESPLOG_METRICS_KEY",
        default=None,
        help="The scrape token for --metrics key (a secret: prefer the environment).",
    ),
]


def metrics_options(func: F) -> F:
    """`worker`'s metrics page: its port and bind, and who may read it (as `serve`'s)."""
    options = [
        click.option(
            "--metrics-port",
            envvar="RESPLOG_METRICS_PORT",
            default=None,
            type=click.IntRange(min=0, max=65535),
            help="Serve GET /metrics (Prometheus) on this port (0: any free one). "
            "Default: no metrics port.",
        ),
        click.option(
            "--metrics-host",
            envvar="RESPLOG_METRICS_HOST",
            default="127.0.0.1",
            show_default=True,
            help="The address the metrics port binds.",
        ),
        *_METRICS_OPTIONS,
    ]
    for option in reversed(options):
        func = option(func)
    return func


def access_options(func: F) -> F:
    """The options `serve` passes on to `access_settings` as keyword arguments."""
    options = [
        click.option(
            "--auth",
            envvar="RESPLOG_AUTH",
            type=click.Choice(["keys", "none"]),
            default=None,
            help="keys: every /v1 request needs 'Authorization: Bearer <key>'; none: every "
            "request acts as owner 'anonymous' (loopback binds only). Default: none on a "
            "loopback bind, keys otherwise.",
        ),
        click.option(
            "--rate-limit",
            envvar="RESPLOG_RATE_LIMIT",
            default=0.0,
            show_default=True,
            type=click.FloatRange(min=0),
            help="Requests per second per API key, per process (0: no limit).",
        ),
        click.option(
            "--rate-burst",
            envvar="RESPLOG_RATE_BURST",
            default=0,
            show_default=True,
            type=click.IntRange(min=0),
            help="Requests a key may make at once above its rate (0: the rate, rounded up).",
        ),
        click.option(
            "--max-streams-per-key",
            envvar="RESPLOG_MAX_STREAMS_PER_KEY",
            default=256,
            show_default=True,
            type=click.IntRange(min=0),
            help="Concurrent SSE/JSON Lines streams per API key, per process (0: no limit).",
        ),
        click.option(
            "--key-cache-s",
            envvar="RESPLOG_KEY_CACHE_S",
            default=10.0,
            show_default=True,
            type=click.FloatRange(min=0),
            help="How long a key lookup is cached: a revoked key stops working within this.",
        ),
        click.option(
            "--hosted-tools",
            envvar="RESPLOG_HOSTED_TOOLS",
            type=click.Choice(["accept", "refuse"]),
            default="accept",
            show_default=True,
            help="Tools OpenAI runs itself (web_search, file_search, ...), which this server "
            "cannot: accept (echoed, not offered to the model, recorded in the log) or refuse "
            "(a 400 naming the tool).",
        ),
        *_METRICS_OPTIONS,
        click.option(
            "--audit-view",
            envvar="RESPLOG_AUDIT_VIEW",
            type=click.Choice(["auto", "open", "key", "off"]),
            default="auto",
            show_default=True,
            help="The read-only web audit view at /audit (docs/audit.md): open, key "
            "(Authorization: Bearer <--audit-key>, or the key typed into the page), or off; "
            "auto: open on a loopback bind, else off; under --auth keys, key (off without "
            "an --audit-key).",
        ),
        click.option(
            "--audit-key",
            envvar="RESPLOG_AUDIT_KEY",
            default=None,
            help="The key for --audit-view key (a secret: prefer the environment).",
        ),
        click.option(
            "--send-timeout-s",
            envvar="RESPLOG_SEND_TIMEOUT_S",
            default=30.0,
            show_default=True,
            type=click.FloatRange(min=0),
            help="Drop a connection whose client has read nothing for this long (0: never).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return _limit_options(func)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


_ACCESS = ("auth", "rate_limit", "rate_burst", "max_streams_per_key", "key_cache_s")


def access_settings(host: str, options: dict[str, Any]) -> dict[str, Any]:
    """The `Settings` fields that `access_options` fill, checked against the bind; takes
    those options out of `options` (the rest belong to other option groups)."""
    mine = {name: options.pop(name) for name in _ACCESS}
    limits = {
        f.name: options.pop(f.name) for f in msgspec.structs.fields(Limits) if f.name != "builtins"
    }
    limits["builtins"] = bool(options.get("tool_server"))
    auth: Literal["keys", "none"] = mine["auth"] or ("none" if is_loopback(host) else "keys")
    if auth == "none" and not is_loopback(host):
        raise ResplogError(
            f"--auth none is only allowed on a loopback bind (not {host}); "
            "use --auth keys and create keys with `resplog keys create --owner NAME`"
        )
    return {
        "limits": Limits(**limits),
        "access": AccessPolicy(
            auth=auth,
            rate_limit=mine["rate_limit"],
            rate_burst=mine["rate_burst"],
            max_streams_per_key=mine["max_streams_per_key"],
            key_cache_s=mine["key_cache_s"],
        ),
        "send_timeout_s": options.pop("send_timeout_s"),
        **metrics_settings(host, options.pop("metrics"), options.pop("metrics_key")),
        **audit_settings(host, options.pop("audit_view"), options.pop("audit_key"), auth),
    }


def metrics_settings(host: str, mode: str, key: str | None) -> dict[str, Any]:
    """`--metrics` resolved: `auto` is open on a loopback bind, else key-protected when a
    scrape key is set, else off. `key` without a key is refused."""
    if mode == "auto":
        mode = "open" if is_loopback(host) else ("key" if key else "off")
    if mode == "key" and not key:
        raise ResplogError("--metrics key needs --metrics-key (or RESPLOG_METRICS_KEY)")
    return {"metrics": mode, "metrics_key": key}


def audit_settings(host: str, mode: str, key: str | None, auth: str = "none") -> dict[str, Any]:
    """`--audit-view` resolved: `auto` is open on a loopback bind and off elsewhere (the log
    holds every prompt: exposing it beyond the host must be asked for), and under `--auth
    keys` it is `key` (off without a key): a server that checks API keys shows no owner's
    prompts to whoever reaches its port. `key` without a key is refused."""
    if mode == "auto" and auth == "keys":
        mode = "key" if key else "off"
    elif mode == "auto":
        mode = "open" if is_loopback(host) else "off"
    if mode == "key" and not key:
        raise ResplogError("--audit-view key needs --audit-key (or RESPLOG_AUDIT_KEY)")
    return {"audit_view": mode, "audit_key": key}


async def announce(policy: AccessPolicy, keys: ApiKeyStore) -> None:
    """Say at start-up how requests are admitted (a warning when nobody is checked)."""
    if policy.auth == "none":
        log.warning(
            "auth: none - no API key is checked and every request acts as owner 'anonymous' "
            "(allowed on a loopback bind only)"
        )
        return
    live = sum(1 for key in await keys.all() if key.revoked_at is None)
    log.info("auth: keys (%d live API keys)", live)
    if live == 0:
        log.warning("auth: no live API key exists; create one: resplog keys create --owner NAME")
