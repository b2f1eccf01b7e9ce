"""What every forwarded operation leaves behind (ADR 0031): metrics by served name, the trace
context across the hop, one audit record.

Written once, in :meth:`Forwarder.forward <mcp_reconciler.api.frontdoor.forwarding.Forwarder.forward>`,
where every tool call, resource read, prompt get and completion passes — whichever lane
(normal, fast, held exchange) carried it.

- **Metrics**: ``frontdoor.operation.duration`` (histogram, s, by ``kind``, ``name``, ``outcome``;
  its ``_count`` is the calls by outcome) and ``frontdoor.upstream.duration`` (histogram, s, the
  upstream's share, by ``kind`` and ``source``). ``name`` is bounded (:class:`NameLabels`): only
  names that resolved in the catalog get a label, the first ``telemetry.served_names_max`` of
  them their own; later ones are ``other``, unresolved ones ``unknown``.
- **Trace context**: the client's ``traceparent`` (``_meta`` per the MCP trace-context
  convention, else the HTTP header) is the parent of the gateway's ``frontdoor.operation`` span
  unless the SDK's server span already continues that trace; the upstream request's ``_meta``
  carries the gateway span as its parent (:func:`inject`). Without a tracer provider the client's
  context passes through unchanged.
- **Audit**: one ``<kind>`` record (``tools.call``, ``resources.read``, ``prompts.get``,
  ``completion.complete``) with principal, session, view, source, served and upstream name,
  revision, definition digest, outcome, error code, duration and sizes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import anyio
from mcp import MCPError
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from pydantic_core import PydanticSerializationError, to_json

from mcp_reconciler.api.frontdoor.passthrough import RawResult
from mcp_reconciler.api.frontdoor.revisions import REVISION_META, request_header
from mcp_reconciler.reconciler import audit, telemetry
from mcp_reconciler.reconciler.model import CatalogEntry

#: Every forwarded operation by kind, served name and outcome (``frontdoor.operation.duration``,
#: ADR 0008; ``name`` added by ADR 0031, bounded by :class:`NameLabels`). Its ``_count`` is the
#: calls by outcome. One instrument: each SDK record costs microseconds on the call path.
operation_duration = telemetry.meter.create_histogram(
    "frontdoor.operation.duration",
    unit="s",
    description="Downstream operations (call/read/get/complete), by kind, served name (bounded: other, unknown) "
    "and outcome",
)
_upstream = telemetry.meter.create_histogram(
    "frontdoor.upstream.duration", unit="s", description="Time the upstream took to answer, by kind and source"
)

AUDIT_KINDS = {
    "tool": "tools.call",
    "resource": "resources.read",
    "prompt": "prompts.get",
    "complete": "completion.complete",
}
TRACE_KEYS = ("traceparent", "tracestate")


class NameLabels:
    """The ``name`` label of a served name: itself for the first ``cap`` distinct names seen,
    ``other`` after that (bounded cardinality, whatever the catalog's size or churn)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._seen: set[str] = set()

    def __call__(self, name: str | None) -> str:
        """The label for ``name`` (``None``: a name that did not resolve)."""
        if name is None:
            return "unknown"
        if name in self._seen:
            return name
        if len(self._seen) < self.cap:
            self._seen.add(name)
            return name
        return "other"


@dataclass
class OpFacts:
    """What an operation resolved to, filled in as it goes (for the metrics and the record)."""

    entry: CatalogEntry | None = None
    result: Any = None
    drifted: bool = False  # served although its definition changed since the grant (I10 flag)
    revision: int | None = None
    upstream_s: float | None = None
    session: str | None = None
    principal: str | None = None
    view: str | None = None


def client_context(ctx: Any, meta: Mapping[str, Any] | None) -> otel_context.Context | None:
    """The client's trace context to parent the gateway's span on, or ``None`` to keep the
    ambient one (no client context, or the SDK's server span already continues that trace)."""
    carrier: Mapping[str, Any] | None = meta if meta and "traceparent" in meta else None
    if carrier is None:
        request = getattr(ctx, "request", None)
        value = request_header(request, "traceparent")
        if not value:
            return None
        carrier = {"traceparent": value, "tracestate": request_header(request, "tracestate") or ""}
    try:
        parent = propagate.extract(dict(carrier))
    except (ValueError, TypeError):
        return None
    parent_span = trace.get_current_span(parent).get_span_context()
    if not parent_span.is_valid:
        return None
    ambient = trace.get_current_span().get_span_context()
    if ambient.is_valid and ambient.trace_id == parent_span.trace_id:
        return None  # the SDK's server span is already a child of the client's
    return parent


def inject(meta: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``meta`` for the upstream with the current span as ``traceparent`` (``tracestate`` too):
    the gateway's span is the upstream's parent. Unchanged when there is no valid span."""
    if not trace.get_current_span().get_span_context().is_valid:
        return dict(meta) if meta else None
    out = {k: v for k, v in (meta or {}).items() if k not in TRACE_KEYS}
    propagate.inject(out)
    return out


def size_of(value: Any) -> int | None:
    """Bytes of ``value`` as compact JSON (pydantic-core's serializer: models and plain data
    alike, without building an intermediate dict), for the audit record."""
    if value is None:
        return None
    try:
        return len(to_json(value.data if isinstance(value, RawResult) else value, by_alias=True, exclude_none=True))
    except (TypeError, ValueError, PydanticSerializationError):
        return None


class OperationObserver:
    """Records one finished operation: the per-name metrics always, the audit record when the
    audit trail is on (its sizes and digest are computed only then)."""

    def __init__(self, names_max: int = 200) -> None:
        self.names = NameLabels(names_max)

    @contextmanager
    def operation(
        self, ctx: Any, label: str, name: str, meta: Mapping[str, Any] | None, arguments: Any = None
    ) -> Iterator[OpFacts]:
        """The ``frontdoor.operation`` span (parented on the client's trace context; attributes
        ``mcp.kind``, ``revision``, ``source``, ``error.code``) around one operation, and
        :meth:`finish` when it ends; the block fills the yielded :class:`OpFacts`. ``outcome``:
        ``ok``, the client error code of an ``MCPError``, or ``cancelled`` for anything else."""
        facts = OpFacts()
        t0 = anyio.current_time()
        outcome = "ok"
        parent = client_context(ctx, meta)
        spans: Any = (
            telemetry.tracer.start_as_current_span(
                "frontdoor.operation", context=parent, attributes={"mcp.kind": label}
            )
            if parent is not None or telemetry.tracing()
            # No tracer provider and no client context: the no-op span would only carry the
            # ambient context, which stays current anyway (what ``inject`` sends is the same).
            else nullcontext(trace.INVALID_SPAN)
        )
        with spans as span:
            try:
                yield facts
                if span.is_recording():
                    meta_out = (facts.result.meta if facts.result else None) or {}
                    span.set_attribute("revision", meta_out.get(REVISION_META, -1))
                    if facts.entry is not None:
                        span.set_attribute("source", facts.entry.source)
            except MCPError as exc:
                data = exc.error.data
                outcome = str(data.get("code", "error")) if isinstance(data, dict) else "error"
                span.set_attribute("error.code", outcome)
                raise
            except BaseException:
                outcome = "cancelled"
                raise
            finally:
                elapsed = anyio.current_time() - t0
                self.finish(label, name, facts, outcome, elapsed, arguments=arguments, result=facts.result)

    def finish(
        self,
        label: str,
        name: str,
        facts: OpFacts,
        outcome: str,
        duration_s: float,
        *,
        arguments: Any = None,
        result: Any = None,
    ) -> None:
        """Record an operation of kind ``label`` on ``name`` (as the client sent it) that ended
        with ``outcome`` (``ok``, the client error code, or ``cancelled``)."""
        entry = facts.entry
        operation_duration.record(
            duration_s,
            {"kind": label, "name": self.names(entry.exposed_name if entry is not None else None), "outcome": outcome},
        )
        if facts.upstream_s is not None and entry is not None:
            _upstream.record(facts.upstream_s, {"kind": label, "source": entry.source})
        if not audit.enabled():
            return
        audit.record(
            AUDIT_KINDS.get(label, f"{label}.call"),
            principal=facts.principal,
            session=facts.session,
            view=facts.view,
            source=entry.source if entry is not None else None,
            name=name,
            upstream_name=entry.upstream_name if entry is not None else None,
            revision=facts.revision,
            digest=entry.digest if entry is not None else None,
            outcome="ok" if outcome == "ok" else "error",
            error=None if outcome == "ok" else outcome,
            duration_ms=round(duration_s * 1000, 3),
            request_bytes=size_of(arguments),
            response_bytes=size_of(result) if outcome == "ok" else None,
            args_sha256=audit.argument_digest(arguments),
            reason="drift_flagged" if facts.drifted else None,
        )


_relayed = telemetry.meter.create_counter(
    "frontdoor.relay.requests", description="Server→client requests from upstreams, by kind and outcome"
)


def relayed(kind: str, outcome: str, source: str, binding: Any) -> None:
    """One server→client request from ``source`` answered (``outcome``: ``ok`` or the error
    code): counted, and recorded for the session it reached (``binding``, if it was attributed)."""
    _relayed.add(1, {"kind": kind, "outcome": outcome})
    if audit.enabled():
        audit.record(
            "relay.request",
            principal=binding.principal if binding is not None else None,
            session=binding.session.id if binding is not None else None,
            source=source,
            reason=kind,
            outcome="ok" if outcome == "ok" else "error",
            error=None if outcome == "ok" else outcome,
        )
