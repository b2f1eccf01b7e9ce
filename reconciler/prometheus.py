"""The Prometheus text exposition (format 0.0.4) of every OpenTelemetry instrument (ADR 0031).

One source of truth: the instruments in ``reconciler/telemetry.py`` (and any other instrument
created on the shared meter ``mcp_reconciler`` — nothing here lists them). :class:`PrometheusReader`
is an OpenTelemetry SDK *pull* reader: each scrape collects the SDK's cumulative data points and
:func:`render` turns them into text. No second registry, no global state of its own: a scrape is
the only time work is done, and the call path pays only the SDK's instrument cost.

Names follow Prometheus conventions, derived mechanically from the OpenTelemetry name, unit and
kind (:func:`prom_name`): ``reconciler.cycles`` → ``mcp_reconciler_cycles_total``,
``frontdoor.operation.duration`` (unit ``s``) → ``mcp_reconciler_frontdoor_operation_duration_seconds``.
Attribute keys become label names (dots to underscores); every series also carries the
reader's constant labels (the replica id in a cluster)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.sdk.metrics import Histogram as HistogramInstrument
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    MetricReader,
    MetricsData,
    Sum,
)
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View

#: Bucket bounds (seconds) of every histogram whose unit is ``s``: 0.5 ms to 60 s. The SDK's
#: defaults (0, 5, 10, 25, … 10000) are milliseconds-shaped and would put every call in one bucket.
SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_INVALID = re.compile(r"[^a-zA-Z0-9_:]")
_INVALID_LABEL = re.compile(r"[^a-zA-Z0-9_]")
_UNITS = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "1": ""}


def seconds_views() -> list[View]:
    """Views giving every ``s`` histogram :data:`SECONDS_BUCKETS` (install with the MeterProvider)."""
    return [
        View(
            instrument_type=HistogramInstrument,
            instrument_unit="s",
            aggregation=ExplicitBucketHistogramAggregation(boundaries=SECONDS_BUCKETS),
        )
    ]


def prom_name(name: str, unit: str, *, counter: bool) -> str:
    """The Prometheus name of an instrument: ``mcp_`` + the name if it already starts with
    ``reconciler``, else ``mcp_reconciler_`` + the name; dots become underscores; the unit's
    base-unit suffix (``_seconds``, ``_bytes``) once; ``_total`` for monotonic counters."""
    base = _INVALID.sub("_", name)
    base = "mcp_" + base if base.startswith("reconciler_") or base == "reconciler" else "mcp_reconciler_" + base
    suffix = _UNITS.get(unit, _INVALID.sub("_", unit) if unit else "")
    if suffix and not base.endswith("_" + suffix):
        base = f"{base}_{suffix}"
    if counter:
        base = base.removesuffix("_total") + "_total"
    return base


def _label_name(key: str) -> str:
    out = _INVALID_LABEL.sub("_", key)
    return "_" + out if out[:1].isdigit() else out


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(attrs: Mapping[str, Any], const: Mapping[str, str], extra: tuple[str, str] | None = None) -> str:
    pairs = [(_label_name(k), v) for k, v in const.items()]
    pairs += [(_label_name(k), v) for k, v in sorted(attrs.items())]
    if extra is not None:
        pairs.append(extra)
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _num(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def render(data: MetricsData | None, const_labels: Mapping[str, str] | None = None) -> str:
    """``data`` (one collection) as Prometheus text. Instruments with the same Prometheus name
    (from different scopes) are merged under one ``# TYPE``; a metric with no points is omitted."""
    const = dict(const_labels or {})
    blocks: dict[str, tuple[str, str, list[str]]] = {}  # name -> (type, help, lines)
    for resource_metrics in data.resource_metrics if data is not None else ():
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                _render_metric(metric, const, blocks)
    out: list[str] = []
    for name, (kind, help_, lines) in blocks.items():
        if not lines:
            continue
        out.append(f"# HELP {name} {_escape(help_) if help_ else name}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(lines)
    return "\n".join(out) + "\n" if out else ""


def _render_metric(metric: Any, const: Mapping[str, str], blocks: dict[str, tuple[str, str, list[str]]]) -> None:
    data = metric.data
    if isinstance(data, Sum):
        counter = data.is_monotonic
        name = prom_name(metric.name, metric.unit or "", counter=counter)
        lines = blocks.setdefault(name, ("counter" if counter else "gauge", metric.description, []))[2]
        for point in data.data_points:
            lines.append(f"{name}{_labels(point.attributes or {}, const)} {_num(point.value)}")
    elif isinstance(data, Gauge):
        name = prom_name(metric.name, metric.unit or "", counter=False)
        lines = blocks.setdefault(name, ("gauge", metric.description, []))[2]
        for point in data.data_points:
            lines.append(f"{name}{_labels(point.attributes or {}, const)} {_num(point.value)}")
    elif isinstance(data, Histogram):
        name = prom_name(metric.name, metric.unit or "", counter=False)
        lines = blocks.setdefault(name, ("histogram", metric.description, []))[2]
        for hpoint in data.data_points:
            attrs = hpoint.attributes or {}
            running = 0
            for bound, count in zip(hpoint.explicit_bounds, hpoint.bucket_counts, strict=False):
                running += count
                lines.append(f"{name}_bucket{_labels(attrs, const, ('le', _num(float(bound))))} {running}")
            lines.append(f"{name}_bucket{_labels(attrs, const, ('le', '+Inf'))} {hpoint.count}")
            lines.append(f"{name}_sum{_labels(attrs, const)} {_num(hpoint.sum)}")
            lines.append(f"{name}_count{_labels(attrs, const)} {hpoint.count}")


class PrometheusReader(MetricReader):
    """A pull reader: :meth:`scrape` collects every instrument of the MeterProvider it is
    installed on and renders it (cumulative temporality, as Prometheus expects).
    ``const_labels`` are added to every series (``replica`` in a cluster)."""

    def __init__(self, const_labels: Mapping[str, str] | None = None) -> None:
        super().__init__(preferred_temporality=_cumulative())
        self.const_labels: dict[str, str] = dict(const_labels or {})
        self._last: MetricsData | None = None

    def _receive_metrics(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> None:
        self._last = metrics_data

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Nothing to release: the reader holds only the last collection."""

    def scrape(self) -> str:
        """Collect now and render (the text a ``GET /metrics`` answers)."""
        self.collect()
        return render(self._last, self.const_labels)


def _cumulative() -> dict[type, AggregationTemporality]:
    from opentelemetry.sdk.metrics import (
        Counter,
        ObservableCounter,
        ObservableGauge,
        ObservableUpDownCounter,
        UpDownCounter,
    )

    kinds: Iterable[type] = (
        Counter,
        UpDownCounter,
        HistogramInstrument,
        ObservableCounter,
        ObservableUpDownCounter,
        ObservableGauge,
    )
    return dict.fromkeys(kinds, AggregationTemporality.CUMULATIVE)


def parse_text(text: str) -> dict[str, float]:
    """Parse exposition text into ``{"name{labels}": value}`` (sample lines only; labels as
    rendered). For tests and the bench: a scrape's values by series."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        out[series] = float(value)
    return out
