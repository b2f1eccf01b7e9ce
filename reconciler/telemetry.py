"""OpenTelemetry instruments for the engine (API only: an SDK/exporter is the host's choice).

Names are stable and documented in README "Observability". Instruments are process-global (the
global meter keeps every instrument and its callbacks forever), so each is created once, here.
The pin gauges observe only the runtimes their owner registered (:meth:`PinGauges.observing`)
for as long as it is registered — nothing registers itself as a side effect of construction."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Meter, Observation

tracer = trace.get_tracer("mcp_reconciler")
meter = metrics.get_meter("mcp_reconciler")

triggers_received = meter.create_counter(
    "reconciler.triggers", description="Triggers received (dirty marks), before coalescing"
)
triggers_coalesced = meter.create_counter(
    "reconciler.triggers.coalesced", description="Triggers absorbed into an already-dirty key"
)
cycles_run = meter.create_counter("reconciler.cycles", description="Reconcile cycles run, by outcome")
cycle_duration = meter.create_histogram(
    "reconciler.cycle.duration", unit="s", description="Wall time of one reconcile cycle"
)
publishes = meter.create_counter("reconciler.publishes", description="Generations published")
publications_deferred = meter.create_counter(
    "reconciler.publications.deferred", description="Publications deferred because retiring was full"
)
candidates_discarded = meter.create_counter(
    "reconciler.candidates.discarded", description="Candidates equal to the current generation (I3)"
)
forced_drains = meter.create_counter(
    "reconciler.drains.forced", description="Generations closed at their drain deadline with work left"
)
source_reads = meter.create_counter("reconciler.source.reads", description="Source listings, by outcome")
reconnects = meter.create_counter("reconciler.reconnects", description="Upstream reconnect attempts")
upstream_messages_refused = meter.create_counter(
    "reconciler.upstream.messages_refused", description="Upstream messages refused at a bound while read, by bound"
)
metadata_entries = meter.create_counter(
    "reconciler.metadata.entries",
    description="Untrusted definitions admitted with a change or a finding, by outcome (projected|flagged|quarantined)",
)

# The engine-event stream's edge (api/events.py, GET /v1/events): followers connected, refused at
# the stream bound, and dropped (slow_reader: its buffer overflowed; write_timeout: it stopped reading).
event_stream_clients = meter.create_up_down_counter(
    "gateway.events.clients", description="Event-stream followers connected (GET /v1/events)"
)
event_stream_refused = meter.create_counter(
    "gateway.events.refused", description="Event-stream requests refused at the concurrent-stream bound"
)
event_stream_dropped = meter.create_counter(
    "gateway.events.dropped", description="Event-stream followers dropped, by reason (slow_reader|write_timeout)"
)
events_emitted = meter.create_counter("reconciler.events", description="Engine events emitted, by type")


class _LivePins(Protocol):
    @property
    def revision(self) -> int: ...

    @property
    def pins(self) -> int: ...


class PinSource(Protocol):
    """What the pin gauges read: a runtime's live generations and its cumulative pin count."""

    @property
    def pins_total(self) -> int:
        """Pins taken since the runtime started (cumulative, never decreases)."""

    def live(self) -> Sequence[_LivePins]:
        """The live generations, each with its revision and current pin count."""


class PinGauges:
    """``reconciler.generation.pins`` (gauge per live revision) and ``reconciler.pins``
    (cumulative pins taken), summed over the runtimes currently registered."""

    def __init__(self, meter: Meter) -> None:
        self._sources: list[PinSource] = []
        meter.create_observable_gauge(
            "reconciler.generation.pins", callbacks=[self._observe_pins], description="Pins held per live generation"
        )
        meter.create_observable_counter(
            "reconciler.pins", callbacks=[self._observe_total], description="Pins taken on generations (cumulative)"
        )

    @contextmanager
    def observing(self, source: PinSource) -> Iterator[None]:
        """Export ``source``'s pins while the block runs; it is forgotten on exit, however it exits."""
        self._sources.append(source)
        try:
            yield
        finally:
            self._sources.remove(source)

    def observed(self) -> tuple[PinSource, ...]:
        """The sources exported right now."""
        return tuple(self._sources)

    def _observe_pins(self, _options: CallbackOptions) -> Iterable[Observation]:
        sources = list(self._sources)
        return [Observation(live.pins, {"revision": live.revision}) for src in sources for live in src.live()]

    def _observe_total(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(sum(src.pins_total for src in list(self._sources)))]


pin_gauges = PinGauges(meter)

cluster_events = meter.create_counter(
    "reconciler.cluster.events", description="Cluster store events applied by this replica, by kind"
)
cluster_reloads = meter.create_counter(
    "reconciler.cluster.reloads", description="Full cache reloads from the cluster store (start, stream gap)"
)
cluster_write_failures = meter.create_counter(
    "reconciler.cluster.write_failures", description="Cluster store writes that failed or lost a compare-and-set"
)
approvals = meter.create_counter(
    "reconciler.approvals",
    description="Approvals of calls that need one, by outcome: requested, approved, denied, expired, changed, "
    "withdrawn, refused (parked-call bound), covered (an earlier approval covered the call)",
)
approvals_parked = meter.create_up_down_counter(
    "reconciler.approvals.parked", description="Calls parked waiting for an approval now"
)

# Rate and concurrency limits (reconciler/limiter.py, ADR 0033), by the rule's name.
limits_refused = meter.create_counter(
    "gateway.limits.refused",
    description="Calls refused by a limit, by limit and reason (rate|concurrency|queue_timeout|unavailable)",
)
limits_queued = meter.create_counter(
    "gateway.limits.queued", description="Calls that waited in a concurrency rule's queue, by limit"
)
limits_unchecked = meter.create_counter(
    "gateway.limits.unchecked",
    description="Calls let through unchecked because the cluster store was unreachable (fail: open), by limit",
)
