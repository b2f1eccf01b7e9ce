"""OpenTelemetry instruments for the engine (API only: an SDK/exporter is the host's choice).

Names are stable and documented in README "Observability"."""

from __future__ import annotations

from opentelemetry import metrics, trace

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
metadata_entries = meter.create_counter(
    "reconciler.metadata.entries",
    description="Untrusted definitions admitted with a change or a finding, by outcome (projected|flagged|quarantined)",
)
