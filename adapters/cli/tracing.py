"""`--otel-endpoint` of `serve` and `worker`: OpenTelemetry tracing (adapters/otel, the
optional `otel` extra), imported only when configured; and `watching`, how the traces and
the metrics are attached to a process."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from adapters.cli.common import log
from domain.errors import ResplogError
from service.settings import Settings

if TYPE_CHECKING:
    from adapters.metrics import Metrics
    from adapters.otel import OtelTracer
    from adapters.wiring import Process

otel_option = click.option(
    "--otel-endpoint",
    envvar="RESPLOG_OTEL_ENDPOINT",
    default=None,
    help="Send OpenTelemetry traces over OTLP/HTTP to this collector base URL (needs the "
    "otel extra); the standard OTEL_EXPORTER_OTLP_ENDPOINT turns them on too. Default: off.",
)


def open_tracer(settings: Settings) -> OtelTracer | None:
    """The OpenTelemetry tracer when tracing is configured (the flag, or the standard OTLP
    variables); else None, and opentelemetry's SDK is never imported."""
    if not (
        settings.otel_endpoint
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    ):
        return None
    endpoint = settings.otel_endpoint
    if endpoint and not endpoint.startswith(("http://", "https://")):
        # Named without its value: a collector URL may carry credentials.
        raise ResplogError("--otel-endpoint must be an http:// or https:// URL")
    try:
        from adapters.otel import OtelTracer
    except ImportError:
        raise ResplogError(
            "tracing is configured but OpenTelemetry is not installed: pip install 'resplog[otel]'"
        ) from None
    log.info("tracing: OpenTelemetry over OTLP/HTTP")
    return OtelTracer(endpoint)


def watching(tracer: OtelTracer | None, metrics: Metrics | None) -> Callable[[Process], None]:
    """`running_process`'s `attach`: the traces and metrics a process has, if any, attached
    before its background work starts (its start-up sweep and first claims are seen)."""

    def attach(process: Process) -> None:
        if tracer is not None:
            process.trace(tracer)
        if metrics is not None:
            process.measure(metrics)

    return attach
