"""Optional OpenTelemetry console export (``mcp-reconciler --otel-console ...``).

The engine depends on the OpenTelemetry *API* only (``reconciler/telemetry.py``); without an SDK
every span and instrument is a no-op. This module installs the SDK's console exporters as the
global providers, for looking at what the gateway emits without running a collector:

- traces: ``TracerProvider`` + ``SimpleSpanProcessor(ConsoleSpanExporter)``, one JSON document
  per finished span on stderr;
- metrics: ``MeterProvider`` + ``PeriodicExportingMetricReader(ConsoleMetricExporter)``, every
  ``export_interval_s`` (default 10 s) and once more at shutdown, on stderr.

stdout is left alone: on ``stdio`` it carries the MCP protocol. The SDK is an optional extra
(``pip install 'mcp-reconciler[otel]'``); it is imported only when this is called.

The module-level tracer and meter in ``reconciler/telemetry.py`` are created at import time
through the API's global proxies (``ProxyTracer`` / ``_ProxyMeter``), which delegate to the
providers set here whenever they are set, so import order does not matter; the CLI still
configures before it imports the engine, which keeps that independent of the proxies."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TextIO

INSTALL_HINT = "pip install 'mcp-reconciler[otel]'"
DEFAULT_EXPORT_INTERVAL_S = 10.0


class OtelUnavailableError(RuntimeError):
    """The OpenTelemetry SDK is not installed."""


def configure_console(
    service_name: str = "mcp-reconciler",
    *,
    out: TextIO | None = None,
    export_interval_s: float = DEFAULT_EXPORT_INTERVAL_S,
) -> Callable[[], None]:
    """Install console span and metric exporters (writing to ``out``, default stderr) as the
    global OpenTelemetry providers. Returns a shutdown function that flushes both (spans are
    exported as they end; metrics get a last export); it is idempotent. The SDK also shuts the
    providers down at interpreter exit.

    Raises :class:`OtelUnavailableError` when ``opentelemetry-sdk`` is not installed."""
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError as exc:
        raise OtelUnavailableError(
            f"--otel-console needs the OpenTelemetry SDK, which is not installed ({exc.name or exc}); "
            f"install it with: {INSTALL_HINT}"
        ) from None

    stream = out if out is not None else sys.stderr
    resource = Resource.create({SERVICE_NAME: service_name})

    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=stream)))
    reader = PeriodicExportingMetricReader(
        ConsoleMetricExporter(out=stream), export_interval_millis=export_interval_s * 1000
    )
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    if trace.get_tracer_provider() is not tracer_provider or metrics.get_meter_provider() is not meter_provider:
        # The API allows one global provider per process; the host installed its own first.
        logging.getLogger("mcp_reconciler.otel").warning(
            "an OpenTelemetry provider was already installed in this process; console export may be partial"
        )

    done = False

    def shutdown() -> None:
        nonlocal done
        if done:
            return
        done = True
        tracer_provider.shutdown()
        meter_provider.shutdown()
        stream.flush()

    return shutdown
