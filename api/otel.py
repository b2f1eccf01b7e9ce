"""The process's OpenTelemetry providers: ``/metrics``, OTLP export, console export (ADR 0008, 0031).

:func:`install` sets the SDK providers up once per process: always the Prometheus pull reader
behind ``/metrics``; OTLP/HTTP export of spans and metrics when ``OTEL_EXPORTER_OTLP_ENDPOINT``
(or ``telemetry.otlp_endpoint``) is set; the console exporters with ``--otel-console``.

Console export (``mcp-reconciler --otel-console ...``):

The engine depends on the OpenTelemetry *API* only (``reconciler/telemetry.py``); without an SDK
every span and instrument is a no-op. This module installs the SDK's console exporters as the
global providers, for looking at what the gateway emits without running a collector:

- traces: ``TracerProvider`` + ``SimpleSpanProcessor(ConsoleSpanExporter)``, one JSON document
  per finished span on stderr;
- metrics: ``MeterProvider`` + ``PeriodicExportingMetricReader(ConsoleMetricExporter)``, every
  ``export_interval_s`` (default 10 s) and once more at shutdown, on stderr.

stdout is left alone: on ``stdio`` it carries the MCP protocol. The SDK is a dependency (the
Prometheus reader needs it); the OTLP exporter is the optional extra
(``pip install 'mcp-reconciler[otel]'``), imported only when an endpoint is set.

The module-level tracer and meter in ``reconciler/telemetry.py`` are created at import time
through the API's global proxies (``ProxyTracer`` / ``_ProxyMeter``), which delegate to the
providers set here whenever they are set, so import order does not matter; the CLI still
configures before it imports the engine, which keeps that independent of the proxies."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from mcp_reconciler.reconciler.redaction import redact_text

INSTALL_HINT = "pip install 'mcp-reconciler[otel]'"
DEFAULT_EXPORT_INTERVAL_S = 10.0
#: The standard OpenTelemetry variable naming the OTLP/HTTP base URL (``http://collector:4318``).
OTLP_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
#: The standard OpenTelemetry variable choosing the exemplar filter (``trace_based`` by default).
EXEMPLAR_ENV = "OTEL_METRICS_EXEMPLAR_FILTER"
_log = logging.getLogger("mcp_reconciler.otel")


class OtelUnavailableError(RuntimeError):
    """The OpenTelemetry SDK is not installed."""


def configure_console(
    service_name: str = "mcp-reconciler",
    *,
    out: TextIO | None = None,
    export_interval_s: float = DEFAULT_EXPORT_INTERVAL_S,
) -> Callable[[], None]:
    """Install console span and metric exporters (writing to ``out``, default stderr) as the
    global OpenTelemetry providers (through :func:`install`, so ``/metrics`` and OTLP export
    share them). Returns a shutdown function that flushes both (spans are exported as they
    end; metrics get a last export); it is idempotent.

    Raises :class:`OtelUnavailableError` when ``opentelemetry-sdk`` is not installed."""
    installed = install(
        service_name,
        console=out if out is not None else sys.stderr,
        otlp_endpoint=os.environ.get(OTLP_ENV) or None,
        export_interval_s=export_interval_s,
    )
    return installed.shutdown


@dataclass
class Installed:
    """The process's OpenTelemetry providers, installed once (:func:`install`).

    ``reader`` renders ``/metrics`` (``None`` when another provider was installed first: the
    host's, which we do not replace); ``otlp``: the OTLP endpoint spans and metrics go to;
    ``tracing``: whether an SDK tracer provider of ours records spans."""

    reader: Any
    otlp: str | None
    tracing: bool
    shutdown: Callable[[], None]


_installed: Installed | None = None
_lock = threading.Lock()


def installed() -> Installed | None:
    """What :func:`install` installed in this process, if it ran."""
    return _installed


def install(
    service_name: str = "mcp-reconciler",
    *,
    console: TextIO | None = None,
    otlp_endpoint: str | None = None,
    export_interval_s: float = DEFAULT_EXPORT_INTERVAL_S,
) -> Installed:
    """Install the SDK providers once per process and return them (ADR 0031).

    Always: a ``MeterProvider`` with the Prometheus pull reader (``reconciler/prometheus.py``;
    it does work only when scraped). With ``otlp_endpoint`` (an OTLP/HTTP base URL, as
    ``OTEL_EXPORTER_OTLP_ENDPOINT``): a periodic OTLP metric exporter and a ``TracerProvider``
    with a batching OTLP span exporter (needs the ``[otel]`` extra: the OTLP exporter package).
    With ``console``: the console exporters (``--otel-console``). A tracer provider is installed
    only when spans go somewhere, so without one the call path keeps its no-op spans.

    The API allows one global provider of each kind per process: the first call wins and later
    calls return what it installed (a later call asking for an exporter the first did not set
    up is logged, not applied). A provider installed by the host before us is left in place
    (``reader`` is then ``None``)."""
    global _installed
    with _lock:
        if _installed is not None:
            if otlp_endpoint and _installed.otlp != otlp_endpoint:
                _log.warning(
                    "OpenTelemetry is already set up in this process; OTLP endpoint %s not applied",
                    redact_text(otlp_endpoint),
                )
            return _installed
        _installed = _install(service_name, console, otlp_endpoint, export_interval_s)
        return _installed


def _install(
    service_name: str, console: TextIO | None, otlp_endpoint: str | None, export_interval_s: float
) -> Installed:
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            MetricReader,
            PeriodicExportingMetricReader,
        )
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

        from mcp_reconciler.reconciler.prometheus import PrometheusReader, seconds_views
    except ImportError as exc:
        raise OtelUnavailableError(
            f"OpenTelemetry export needs the OpenTelemetry SDK, which is not installed ({exc.name or exc}); "
            f"install it with: {INSTALL_HINT}"
        ) from None
    resource = Resource.create({SERVICE_NAME: service_name})
    prometheus = PrometheusReader()
    readers: list[MetricReader] = [prometheus]
    processors: list[SpanProcessor] = []
    interval_ms = export_interval_s * 1000
    if console is not None:
        readers.append(
            PeriodicExportingMetricReader(ConsoleMetricExporter(out=console), export_interval_millis=interval_ms)
        )
        processors.append(SimpleSpanProcessor(ConsoleSpanExporter(out=console)))
    if otlp_endpoint:
        try:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise OtelUnavailableError(
                f"OTLP export needs the OTLP exporter, which is not installed ({exc.name or exc}); "
                f"install it with: {INSTALL_HINT}"
            ) from None
        base = otlp_endpoint.rstrip("/")
        readers.append(
            PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=f"{base}/v1/metrics"), export_interval_millis=interval_ms
            )
        )
        processors.append(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces")))
    # Exemplars are samples tied to a recorded span; without an exporter of ours (only the
    # Prometheus text, which carries none) the trace-based filter's check per histogram record
    # finds no span every time (ADR 0038, "Call CPU"). The standard variable still decides.
    exemplars = None if processors or EXEMPLAR_ENV in os.environ else AlwaysOffExemplarFilter()
    meter_provider = MeterProvider(
        resource=resource, metric_readers=readers, views=seconds_views(), exemplar_filter=exemplars
    )
    metrics.set_meter_provider(meter_provider)
    reader: Any = prometheus
    if metrics.get_meter_provider() is not meter_provider:
        # The API allows one global provider per process; the host installed its own first.
        _log.warning("an OpenTelemetry meter provider was already installed in this process; /metrics is empty")
        reader = None
    tracer_provider: Any = None
    if processors:
        tracer_provider = TracerProvider(resource=resource)
        for processor in processors:
            tracer_provider.add_span_processor(processor)
        trace.set_tracer_provider(tracer_provider)
        if trace.get_tracer_provider() is not tracer_provider:
            _log.warning("an OpenTelemetry tracer provider was already installed in this process; spans go there")
    if otlp_endpoint:
        _log.info("OpenTelemetry: exporting spans and metrics over OTLP/HTTP to %s", redact_text(otlp_endpoint))

    done = False

    def shutdown() -> None:
        nonlocal done
        if done:
            return
        done = True
        if tracer_provider is not None:
            tracer_provider.shutdown()
        meter_provider.shutdown()
        if console is not None:
            console.flush()

    return Installed(reader, otlp_endpoint or None, tracer_provider is not None, shutdown)
