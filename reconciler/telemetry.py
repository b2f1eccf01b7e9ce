"""OpenTelemetry instruments for the engine (API only: an SDK/exporter is the host's choice).

Names are stable and documented in README "Observability". Instruments are process-global (the
global meter keeps every instrument and its callbacks forever), so each is created once, here.
The pin gauges observe only the runtimes their owner registered (:meth:`PinGauges.observing`)
for as long as it is registered — nothing registers itself as a side effect of construction."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Protocol

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Meter, Observation

tracer = trace.get_tracer("mcp_reconciler")
meter = metrics.get_meter("mcp_reconciler")


def tracing() -> bool:
    """Whether a tracer provider that may record spans is installed (the SDK's, or the host's):
    without one every span is a no-op that only carries its parent's context, which a hot path
    may skip making (ADR 0038, "Call CPU"). Read per call: a provider may be set at any time."""
    return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


class Tally:
    """A counter on a hot path, kept as a dict increment and read by an observable counter when
    metrics are collected: an SDK ``Counter.add`` per call (attributes cleaned and hashed, views
    matched, a lock taken) was ~5 % of a forwarded ``tools/call``'s CPU (ADR 0038, "Call CPU").
    The exported series are the same a ``Counter`` would give (cumulative, by attributes);
    ``attributes`` is shared by every :meth:`add` with it, so it must not change after."""

    def __init__(self, name: str, description: str) -> None:
        self._counts: collections.Counter[tuple[tuple[str, str], ...]] = collections.Counter()
        self._attributes: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
        meter.create_observable_counter(name, callbacks=[self._observe], description=description)

    def add(self, attributes: Mapping[str, str]) -> None:
        """Count one, by ``attributes`` (a key per distinct set of attributes)."""
        key = tuple(attributes.items())
        if key not in self._counts:
            self._attributes[key] = dict(attributes)
        self._counts[key] += 1

    def value(self, attributes: Mapping[str, str]) -> int:
        """The count so far for exactly ``attributes``."""
        return self._counts[tuple(attributes.items())]

    def _observe(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(n, self._attributes[key]) for key, n in list(self._counts.items())]


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
# Quotas (reconciler/quotas.py, ADR 0032): requests refused because a principal, or everyone
# together, holds as many sessions, grants, holds or event streams as a bound allows; by the
# bound's config key (``bound``: gateway.limits.sessions_per_principal, ...).
quota_refused = meter.create_counter(
    "gateway.quota.refused", description="Control-API requests refused at a quota, by bound (its config key)"
)
# API sessions removed after gateway.limits.api_session_idle_s without use (reconciler/idle.py).
sessions_expired = meter.create_counter(
    "gateway.sessions.expired", description="Control-API sessions removed after their idle expiry"
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

# The cluster store's round trips (ADR 0020), by operation and outcome.
cluster_store_duration = meter.create_histogram(
    "reconciler.cluster.store.duration", unit="s", description="Cluster store operations, by op and outcome"
)
build_duration = meter.create_histogram(
    "reconciler.build.duration", unit="s", description="Wall time of one candidate build (reading sources, merging)"
)
notifications_sent = meter.create_counter(
    "frontdoor.notifications", description="Change notifications sent to downstream sessions, by era"
)
list_changed_lag = meter.create_histogram(
    "frontdoor.list_changed.lag",
    unit="s",
    description="From a publication to the list_changed notification a session was sent about it",
)
list_changed_fanout = meter.create_histogram(
    "frontdoor.list_changed.fanout",
    unit="s",
    description="One notifier pass's deliveries: from the start of the first to the end of the last",
)


#: One gauge reading: ``(value, attributes)``.
Reading = tuple[float, Mapping[str, str]]


class StateSource(Protocol):
    """Something whose current state is exported as gauges (:class:`StateGauges`)."""

    def gauges(self) -> dict[str, Iterable[Reading]]:
        """Readings by gauge name (names from :data:`STATE_GAUGES`); missing names read nothing."""


#: The state gauges: name → (unit, description). Names in :data:`STATE_COUNTERS` are observable
#: counters (cumulative counts kept by their owner), the rest gauges.
STATE_GAUGES: dict[str, tuple[str, str]] = {
    "gateway.limits.hits": (
        "1",
        "Requests or connections refused (or closed to make room) at an I18 bound, by bound: connections, "
        "header_bytes, header_timeout, body_bytes, transport_sessions, transport_sessions_per_client, "
        "metrics_connections, metrics_headers",
    ),
    "reconciler.source.state": ("1", "1 for each source's current state (ready|stale|failed|connecting), by source"),
    "reconciler.source.consecutive_failures": ("1", "Consecutive failed reads of each source"),
    "reconciler.source.last_success_age": ("s", "Seconds since each source last listed completely"),
    "reconciler.revision": ("1", "The current revision"),
    "reconciler.generations.retiring": ("1", "Superseded generations still open (calls in flight, holds)"),
    "frontdoor.sessions": ("1", "Downstream sessions bound now, by era and grant policy"),
}


STATE_COUNTERS = frozenset({"gateway.limits.hits"})


class StateGauges:
    """Observable gauges (:data:`STATE_GAUGES`) over the sources registered with
    :meth:`observing` — like :class:`PinGauges`, nothing registers itself by being built. A
    source that fails while read is skipped for that collection (a gauge never breaks a scrape)."""

    def __init__(self, meter: Meter) -> None:
        self._sources: list[StateSource] = []
        for name, (unit, description) in STATE_GAUGES.items():
            create = meter.create_observable_counter if name in STATE_COUNTERS else meter.create_observable_gauge
            create(name, callbacks=[self._callback(name)], unit=unit, description=description)

    @contextmanager
    def observing(self, source: StateSource) -> Iterator[None]:
        """Export ``source``'s gauges while the block runs."""
        self._sources.append(source)
        try:
            yield
        finally:
            self._sources.remove(source)

    def _callback(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            out: list[Observation] = []
            for source in list(self._sources):
                try:
                    readings = source.gauges().get(name, ())
                    out.extend(Observation(value, attrs) for value, attrs in readings)
                except Exception:  # read from a scrape or an exporter thread: skip, never raise
                    continue
            return out

        return observe


state_gauges = StateGauges(meter)
