"""Engine snapshots as wire models: the one place an :class:`~mcp_reconciler.reconciler.status.
EngineStatus` becomes the control API's ``StatusOut`` (and the JSON the CLI and the front door's
``gateway_status`` tool print). The mapping is field for field; nothing is added or patched."""

from __future__ import annotations

from typing import Any

from mcp_reconciler.reconciler.authority import DriftPolicy, Session
from mcp_reconciler.reconciler.engine import Engine
from mcp_reconciler.reconciler.model import EntryKind
from mcp_reconciler.reconciler.status import EngineStatus
from mcp_reconciler.sdk import wire


def status_out(st: EngineStatus) -> wire.StatusOut:
    """``st`` as the ``/v1/status`` answer."""
    return wire.StatusOut(
        state=st.state,
        revision=st.revision,
        digest=st.digest,
        built_at=st.built_at,
        published_at=st.published_at,
        age_s=st.age_s,
        reconciling=st.reconciling,
        dirty=list(st.dirty),
        reload_mode=st.reload_mode,
        tracked_files=st.tracked_files,
        warnings=list(st.warnings),
        config_error=st.config_error,
        stale_sources=list(st.stale_sources),
        sources=[
            wire.SourceOut(
                name=s.name,
                state=s.state,
                entries=s.entries,
                last_ok_at=s.last_ok_at,
                last_error=s.last_error,
                last_error_at=s.last_error_at,
                consecutive_failures=s.consecutive_failures,
                next_attempt_at=s.next_attempt_at,
                diagnostics=s.diagnostics,
                trust=s.trust,  # type: ignore[arg-type]  # "trusted" | "untrusted" from Trust
                cause=wire.FailureCauseOut(**s.cause.as_dict()) if s.cause is not None else None,
            )
            for s in st.sources
        ],
        entries=st.entries,
        diagnostics=[
            wire.DiagnosticOut(code=d.code, source=d.source, name=d.name, path=d.path, message=d.message)
            for d in st.diagnostics
        ],
        diagnostics_total=st.diagnostics_total,
        retiring=[
            wire.RetiringOut(
                revision=r.revision,
                pins=r.pins,
                operations=r.operations,
                superseded_at=r.superseded_at,
                drain_deadline_in_s=r.drain_deadline_in_s,
            )
            for r in st.retiring
        ],
        pending_publication=st.pending_publication,
        last_cycle=None
        if st.last_cycle is None
        else wire.CycleOut(
            seq=st.last_cycle.seq,
            status=st.last_cycle.status,
            finished_at=st.last_cycle.finished_at,
            error=st.last_cycle.error,
        ),
        inputs_changed_since_build=list(st.inputs_changed_since_build)
        if st.inputs_changed_since_build is not None
        else None,
        holds=st.holds,
        sessions=st.sessions,
        conditions=[wire.ConditionOut(type=c.type, reason=c.reason, message=c.message) for c in st.conditions],
        inputs=[
            wire.InputOut(path=i.path, source=i.source, exists=i.exists, modified_at=i.modified_at) for i in st.inputs
        ],
        views=[
            wire.ViewOut(
                name=v.name,
                entries=v.entries,
                tools=v.counts.get("tool", 0),
                resources=v.counts.get("resource", 0),
                resource_templates=v.counts.get("resource_template", 0),
                prompts=v.counts.get("prompt", 0),
            )
            for v in st.views
        ],
        search_indexes=[
            wire.SearchIndexOut(
                revision=r.revision, view=r.view, tools=r.documents, terms=r.terms, bytes=r.bytes, build_ms=r.build_ms
            )
            for r in st.search_indexes
        ],
    )


def owner_view(out: wire.StatusOut) -> wire.StatusOut:
    """What a principal that is not an operator may read of status (I12): everything but the
    operator's own inputs. ``config_error`` (file paths, line numbers) is withheld — the typed
    ``config_invalid`` condition says the config is invalid — ``warnings`` (which name
    watched files and the config path) become one sentence with their count, and the tracked
    ``inputs`` (file paths) are withheld. A failed source's cause keeps its kind, summary and
    numbers; its ``stderr_tail`` (the upstream's own words) is for operators only (ADR 0027)."""
    warnings = (
        [f"{len(out.warnings)} warning(s) about the gateway's inputs; an operator can read them in status"]
        if out.warnings
        else []
    )
    sources = [
        s.model_copy(update={"cause": s.cause.model_copy(update={"stderr_tail": []})}) if s.cause else s
        for s in out.sources
    ]
    return out.model_copy(
        update={"config_error": None, "warnings": warnings, "inputs": [], "sources": sources, "audit": None}
    )


def status_json(st: EngineStatus) -> dict[str, Any]:
    """``st`` as JSON-ready data (the ``/v1/status`` body)."""
    return wire.dump(status_out(st))


def quarantined_names(session: Session, engine: Engine, limit: int = 1000) -> list[str]:
    """``session``'s granted names whose definition in the current generation differs from the
    one seen at grant time, when the drift policy refuses them (I10); sorted, at most ``limit``."""
    live = engine.current
    if live is None or engine.sessions.drift_policy is not DriftPolicy.QUARANTINE:
        return []
    out: list[str] = []
    for key, seen in session.grants.items():
        kind, _, name = key.partition(":")
        entry = live.generation.routes_for(session.view)[EntryKind(kind)].get(name)
        if seen and entry is not None and entry.digest != seen:
            out.append(name)
            if len(out) >= limit:
                break
    return sorted(out)
