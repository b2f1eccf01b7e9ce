"""Provenance for status answers (I11): which revision, how fresh, from which inputs, and
what is stale or failing — never old numbers presented as current."""

from __future__ import annotations

import time
from typing import Any

from mcp_reconciler.reconciler.reconcile import Reconciler
from mcp_reconciler.reconciler.upstream import UpstreamReader


def status(rec: Reconciler, reader: UpstreamReader | None = None) -> dict[str, Any]:
    """A JSON-ready snapshot of the engine. Errors are the sanitized reasons only (I12)."""
    live = rec.runtime.current
    desired = rec.last_desired
    gen = live.generation if live is not None else None
    health = rec.health.snapshot()
    sources: list[dict[str, Any]] = []
    specs = desired.specs if desired is not None else ()
    for spec in specs:
        h = health.get(spec.name)
        st = gen.source_state(spec.name) if gen is not None else None
        sources.append(
            {
                "name": spec.name,
                "state": h.status if h is not None else "connecting",
                "entries": len(st.entries) if st is not None else 0,
                "last_ok_at": h.last_ok_at if h is not None else None,
                "last_error": h.last_error if h is not None else None,
                "last_error_at": h.last_error_at if h is not None else None,
                "consecutive_failures": h.consecutive_failures if h is not None else 0,
                "next_attempt_at": reader.next_attempt_at(spec.name) if reader is not None else None,
                "diagnostics": len(st.diagnostics) if st is not None else 0,
                "trust": spec.trust.value,
            }
        )
    stale = [s["name"] for s in sources if s["state"] != "ready"]
    warnings = list(desired.warnings) if desired is not None else []
    config_error = desired.config_error if desired is not None else None
    if config_error is not None:
        state = "error"  # inputs changed and the reload failed: explicit, never silently old
    elif gen is None:
        state = "starting"
    elif stale:
        state = "degraded"
    else:
        state = "ready"
    last = rec.last_outcome
    return {
        "state": state,
        "revision": gen.revision if gen is not None else None,
        "digest": gen.digest if gen is not None else None,
        "built_at": gen.built_at if gen is not None else None,
        "published_at": gen.published_at if gen is not None else None,
        "age_s": round(time.time() - gen.built_at, 3) if gen is not None else None,
        "reconciling": rec.reconciling,
        "dirty": sorted(rec.queue.dirty),
        "reload_mode": desired.reload_mode if desired is not None else None,
        "tracked_files": desired.tracked_files if desired is not None else 0,
        "warnings": warnings,
        "config_error": config_error,
        "stale_sources": stale,
        "sources": sources,
        "entries": gen.catalog.entry_count if gen is not None else 0,
        "diagnostics": [
            {"code": d.code, "source": d.source, "name": d.name, "path": d.path, "message": d.message}
            for d in (gen.diagnostics if gen is not None else ())
        ],
        "retiring": [
            {"revision": r.revision, "pins": r.pins, "operations": r.operations, "superseded_at": r.superseded_at}
            for r in rec.runtime.retiring
        ],
        "pending_publication": rec.runtime.pending is not None,
        "last_cycle": None
        if last is None
        else {"seq": last.seq, "status": last.status, "finished_at": last.finished_at, "error": last.error},
    }
