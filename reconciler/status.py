"""Provenance for status answers (I11): which revision, how fresh, from which inputs, and what
is stale, failing or rejected — never old numbers presented as current.

:func:`build_status` reads the engine once and returns an :class:`EngineStatus`: frozen
dataclasses all the way down (tuples, not lists), so a snapshot can be handed to any number of
readers and mapped to a wire model at the edge (``api/views.py``) without anyone patching it.
Every text in it is a sanitized reason (I12): source errors are the reader's sanitized reasons,
diagnostic messages are bounded at construction and scrubbed of control characters here."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, Protocol

import anyio

from mcp_reconciler.reconciler.catalog import bounded
from mcp_reconciler.reconciler.curation import view_counts
from mcp_reconciler.reconciler.desired import TrackedInput
from mcp_reconciler.reconciler.failure_cause import FailureCause
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import Diagnostic
from mcp_reconciler.reconciler.reconcile import Reconciler

State = Literal["starting", "ready", "degraded", "error"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_NAME_BYTES = 160


class ReconnectSchedule(Protocol):
    """Knows when a throttled source may reconnect next (the upstream reader does, I8)."""

    def next_attempt_at(self, source: str) -> float | None:
        """Wall-clock time the throttled ``source`` may reconnect next, or None if it is not throttled."""


@dataclass(frozen=True, slots=True)
class SourceReport:
    """One source's live state. ``state`` is ready | stale | failed | connecting; ``last_error``
    is a sanitized reason; ``diagnostics`` counts the source's listing diagnostics (rejected
    entries, metadata findings); ``trust`` says whether its metadata is projected (I20)."""

    name: str
    state: str
    entries: int
    last_ok_at: float | None
    last_error: str | None
    last_error_at: float | None
    consecutive_failures: int
    next_attempt_at: float | None
    diagnostics: int
    trust: str | None = None
    cause: FailureCause | None = None  # the typed cause of last_error (reconciler/failure_cause.py)


@dataclass(frozen=True, slots=True)
class RetiringReport:
    """A superseded generation still draining; ``drain_deadline_in_s`` is counted from the
    snapshot's time (negative once passed; a hold may extend it)."""

    revision: int
    pins: int
    operations: int
    superseded_at: float | None
    drain_deadline_in_s: float | None


@dataclass(frozen=True, slots=True)
class CycleReport:
    """The newest finished reconcile cycle."""

    seq: int
    status: str
    finished_at: float
    error: str | None


ConditionType = Literal["config_invalid", "publication_deferred"]


@dataclass(frozen=True, slots=True)
class Condition:
    """A typed reason the engine serves, but not as asked (``degraded`` or ``error`` state).

    ``type`` and ``reason`` are stable codes for scripts; ``message`` is a sanitized sentence for
    people (revisions, counts and times only — never paths, hosts or upstream text), safe to
    show every principal that may read status.

    - ``config_invalid`` / ``last_good_config_serving``: the newest config is invalid; the last
      good one serves (details in ``config_error``, operators only).
    - ``publication_deferred`` / ``retiring_set_full``: a new catalog is built but waits, because
      ``retiring_max`` superseded revisions are still open and the current one is pinned (I5);
      the message says which revisions hold the slots (revision holds, operations draining) and
      until when at the latest."""

    type: ConditionType
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class ViewReport:
    """One named view of the current generation (ADR 0026): its entry count, in all and by kind."""

    name: str
    entries: int
    counts: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class EngineStatus:
    """One consistent, immutable reading of the engine (I11).

    ``diagnostics`` lists the current generation's findings — merge-level ones (name collisions,
    sources over bounds) first, then every entry a source's listing rejected (in config order) —
    at most ``Bounds.status_diagnostics`` of them; ``diagnostics_total`` says how many there are.
    ``inputs_changed_since_build`` is set when inputs on disk changed after the served revision
    was built (a reload is pending: ``reconciling`` is then true)."""

    state: State
    revision: int | None
    digest: str | None
    built_at: float | None
    published_at: float | None
    age_s: float | None
    reconciling: bool
    dirty: tuple[str, ...]
    reload_mode: str | None
    tracked_files: int
    warnings: tuple[str, ...]
    config_error: str | None
    stale_sources: tuple[str, ...]
    sources: tuple[SourceReport, ...]
    entries: int
    diagnostics: tuple[Diagnostic, ...]
    diagnostics_total: int
    retiring: tuple[RetiringReport, ...]
    pending_publication: bool
    last_cycle: CycleReport | None
    inputs_changed_since_build: tuple[str, ...] | None = None
    holds: int = 0
    sessions: int = 0
    conditions: tuple[Condition, ...] = ()
    inputs: tuple[TrackedInput, ...] = ()  # tracked files as of the newest load (paths: operators only)
    views: tuple[ViewReport, ...] = ()  # the named views of the current generation, in config order
    #: The search indexes built for the live generations (ADR 0029), current first.
    search_indexes: tuple[SearchIndexReport, ...] = ()


def build_status(
    rec: Reconciler,
    *,
    reconnects: ReconnectSchedule | None = None,
    inputs_changed: frozenset[str] = frozenset(),
    holds: int = 0,
    sessions: int = 0,
    held: Mapping[int, float] | None = None,
    wall_clock: Callable[[], float] = time.time,
) -> EngineStatus:
    """Read ``rec`` (and the reader's reconnect schedule) into an :class:`EngineStatus`.
    ``held`` maps each revision a hold keeps open to the latest expiry of its holds (wall clock),
    for the ``publication_deferred`` condition.

    Synchronous and side-effect free: one consistent reading, no await between the parts."""
    live = rec.runtime.current
    desired = rec.last_desired
    gen = live.generation if live is not None else None
    health = rec.health.snapshot()
    sources: list[SourceReport] = []
    for spec in desired.specs if desired is not None else ():
        h = health.get(spec.name)
        st = gen.source_state(spec.name) if gen is not None else None
        sources.append(
            SourceReport(
                name=spec.name,
                state=h.status if h is not None else "connecting",
                entries=len(st.entries) if st is not None else 0,
                last_ok_at=h.last_ok_at if h is not None else None,
                last_error=h.last_error if h is not None else None,
                last_error_at=h.last_error_at if h is not None else None,
                consecutive_failures=h.consecutive_failures if h is not None else 0,
                next_attempt_at=reconnects.next_attempt_at(spec.name) if reconnects is not None else None,
                diagnostics=len(st.diagnostics) if st is not None else 0,
                trust=spec.trust.value,
                cause=h.cause if h is not None else None,
            )
        )
    stale = tuple(s.name for s in sources if s.state != "ready")
    config_error = desired.config_error if desired is not None else None
    conditions: list[Condition] = []
    if config_error is not None:
        conditions.append(
            Condition(
                "config_invalid",
                "last_good_config_serving",
                "the newest config is invalid; the last good config keeps serving until it is fixed",
            )
        )
    if rec.runtime.pending is not None:
        conditions.append(_deferred(rec, held or {}, wall_clock()))
    state: State
    if config_error is not None:
        state = "error"  # inputs changed and the reload failed: explicit, never silently old
    elif gen is None:
        state = "starting"
    elif stale or rec.runtime.pending is not None:
        state = "degraded"
    else:
        state = "ready"
    found: list[Diagnostic] = []
    if gen is not None:
        found.extend(gen.diagnostics)
        for source in gen.sources:
            found.extend(source.diagnostics)
    limit = rec.bounds.status_diagnostics
    diag_bytes = rec.bounds.diagnostic_bytes
    now = anyio.current_time()
    last = rec.last_outcome
    return EngineStatus(
        state=state,
        revision=gen.revision if gen is not None else None,
        digest=gen.digest if gen is not None else None,
        built_at=gen.built_at if gen is not None else None,
        published_at=gen.published_at if gen is not None else None,
        age_s=round(wall_clock() - gen.built_at, 3) if gen is not None else None,
        reconciling=rec.reconciling or bool(inputs_changed),
        dirty=tuple(sorted(rec.queue.dirty)),
        reload_mode=desired.reload_mode if desired is not None else None,
        tracked_files=desired.tracked_files if desired is not None else 0,
        warnings=tuple(desired.warnings) if desired is not None else (),
        config_error=config_error,
        stale_sources=stale,
        sources=tuple(sources),
        entries=gen.catalog.entry_count if gen is not None else 0,
        diagnostics=tuple(_sanitized(d, diag_bytes) for d in found[:limit]),
        diagnostics_total=len(found),
        retiring=tuple(
            RetiringReport(
                revision=r.revision,
                pins=r.pins,
                operations=r.operations,
                superseded_at=r.superseded_at,
                drain_deadline_in_s=round(r.drain_deadline - now, 3) if r.drain_deadline is not None else None,
            )
            for r in rec.runtime.retiring
        ),
        pending_publication=rec.runtime.pending is not None,
        last_cycle=None
        if last is None
        else CycleReport(seq=last.seq, status=last.status, finished_at=last.finished_at, error=last.error),
        inputs_changed_since_build=tuple(sorted(inputs_changed)) if inputs_changed else None,
        holds=holds,
        sessions=sessions,
        conditions=tuple(conditions),
        inputs=desired.inputs if desired is not None else (),
        views=_views(gen),
        search_indexes=_search_indexes(rec),
    )


@dataclass(frozen=True, slots=True)
class SearchIndexReport:
    """One built search index of a live generation: size and build time (ADR 0029)."""

    revision: int
    view: str | None
    documents: int
    terms: int
    bytes: int
    build_ms: float


def _search_indexes(rec: Reconciler) -> tuple[SearchIndexReport, ...]:
    lives = [rec.runtime.current, *rec.runtime.retiring]
    return tuple(
        SearchIndexReport(live.revision, r.view, r.documents, r.terms, r.bytes, r.build_ms)
        for live in lives
        if live is not None
        for r in live.generation.search.reports()
    )


def _views(gen: Generation | None) -> tuple[ViewReport, ...]:
    if gen is None:
        return ()
    out = []
    for name, routes in gen.catalog.views.items():
        counts = view_counts(routes)
        out.append(ViewReport(name=name, entries=sum(counts.values()), counts=MappingProxyType(counts)))
    return tuple(out)


def _deferred(rec: Reconciler, held: Mapping[int, float], now_wall: float) -> Condition:
    """The ``publication_deferred`` condition: who holds the retiring slots, and until when."""
    now = anyio.current_time()
    parts: list[str] = []
    waits: list[float] = []  # when each slot frees at the latest; the first to free publishes
    for live in rec.runtime.retiring:
        until = held.get(live.revision)
        drain = live.drain_deadline - now if live.drain_deadline is not None else 0.0
        if until is not None:
            waits.append(max(until - now_wall + rec.bounds.drain_grace_s, drain))
            parts.append(f"revision {live.revision} held for {max(0.0, until - now_wall):.0f} s more")
        else:
            waits.append(drain)
            parts.append(f"revision {live.revision} draining {live.operations} operation(s)")
    latest = min(waits, default=0.0)
    current = rec.runtime.current
    pinned = f"; the current revision {current.revision} is pinned" if current is not None else ""
    return Condition(
        "publication_deferred",
        "retiring_set_full",
        f"a new catalog waits to publish: the retiring set is full ({len(rec.runtime.retiring)} of "
        f"{rec.bounds.retiring_max}: {', '.join(parts)}){pinned}; it publishes when one of them closes, "
        f"at the latest in {max(0.0, latest):.0f} s",
    )


def _sanitized(d: Diagnostic, limit: int) -> Diagnostic:
    """Control characters (an upstream may put newlines or escapes in a name) become one space;
    lengths stay bounded even if a construction site forgot to bound them."""
    name = bounded(_CONTROL.sub(" ", d.name), _NAME_BYTES) if d.name is not None else None
    path = bounded(_CONTROL.sub(" ", d.path), _NAME_BYTES * 2) if d.path is not None else None
    return Diagnostic(
        code=d.code, message=bounded(_CONTROL.sub(" ", d.message), limit), source=d.source, name=name, path=path
    )
