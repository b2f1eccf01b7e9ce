"""Building entries and merging per-source states into one routing table.

Merge rules: tools and prompts are exposed as ``<prefix><name>`` (prefix per source, default
``<source>__``); resources keep their URI and templates their URI template, behind the source's
``uri_prefix`` when it has one (``reconciler/uris.py``). On a collision the source declared first
wins and the loser gets a diagnostic whose advice works for the kind (a name prefix for tools and
prompts, a ``uri_prefix`` for resources and templates) — nothing is dropped silently.
A source whose entries would push the candidate over the entry or byte bound contributes
nothing (I2: all or nothing) and gets a diagnostic. An untrusted entry whose text names another
source's tool is flagged (or, under the quarantine policy, left out) here, where all sources
are known (I20, ``metadata.cross_source``); those findings are catalog diagnostics.
Curation (``reconciler/curation.py``, ADR 0026) is applied here too: each source's entries pass
its allow/deny filters and renames before they enter the routing table, and every named view is
projected from the merged table; the curation digest is part of the catalog digest."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.curation import NO_CURATION, Curation, curate_source, project_view
from mcp_reconciler.reconciler.digest import digest_parts
from mcp_reconciler.reconciler.metadata import admit, cross_source
from mcp_reconciler.reconciler.model import CatalogEntry, Diagnostic, EntryKind, SourceSpec, SourceState, SourceStatus
from mcp_reconciler.reconciler.uris import expose, suggested_prefix

EXPOSED_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_PREFIXED_KINDS = (EntryKind.TOOL, EntryKind.PROMPT)


def bounded(text: str, limit: int) -> str:
    """Cut ``text`` to at most ``limit`` UTF-8 bytes, marking the cut."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[: max(0, limit - 3)].decode(errors="ignore") + "..."


def exposed_name_for(spec: SourceSpec, kind: EntryKind, upstream_name: str) -> str:
    """The name (or URI) a source's entry is exposed under: name prefix for tools and prompts,
    URI prefix for resources and templates."""
    if kind in _PREFIXED_KINDS:
        return spec.effective_prefix + upstream_name
    return expose(spec.uri_prefix, upstream_name)


def collision_advice(kind: EntryKind, source: str) -> str:
    """What to set so ``source``'s entry of ``kind`` no longer collides (advice that works: a
    name prefix does nothing for URIs)."""
    if kind in _PREFIXED_KINDS:
        return "set a prefix on one of them"
    tag = suggested_prefix(source)
    return f"set uri_prefix on one of them (e.g. uri_prefix: {tag!r} on {source!r} serves note://x as {tag}note://x)"


def make_entry(spec: SourceSpec, kind: EntryKind, upstream_name: str, definition: Mapping[str, Any]) -> CatalogEntry:
    """One entry with its definition digest (I10: everything but ``_meta``, of the upstream's
    original definition) and its served definition (I20: projected for an untrusted source,
    with provenance ``_meta``). Listing uses :func:`metadata.admit` directly, which also says
    whether the entry is quarantined and what was found."""
    return admit(spec, kind, upstream_name, exposed_name_for(spec, kind, upstream_name), definition).entry


@dataclass(frozen=True, slots=True)
class Catalog:
    """A merged, immutable candidate: what a generation will serve (before it has a revision)."""

    digest: str
    built_at: float
    sources: tuple[SourceState, ...]
    routes: Mapping[EntryKind, Mapping[str, CatalogEntry]]
    diagnostics: tuple[Diagnostic, ...]
    reload_mode: str = "manual"
    tracked_files: int = 0
    warnings: tuple[str, ...] = ()
    config_error: str | None = None
    by_source: Mapping[str, SourceState] = field(default_factory=lambda: MappingProxyType({}))
    #: Named views (``curation.ViewSpec``): view name → its routing table, projected from ``routes``.
    views: Mapping[str, Mapping[EntryKind, Mapping[str, CatalogEntry]]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    curation_digest: str = ""  # "" when nothing is curated

    @property
    def stale_sources(self) -> tuple[str, ...]:
        """Names of the sources not ``ready`` (stale, failed or connecting), in source order."""
        return tuple(s.source for s in self.sources if s.status is not SourceStatus.READY)

    @property
    def entry_count(self) -> int:
        """The number of exposed names over all kinds."""
        return sum(len(table) for table in self.routes.values())

    def connections(self) -> list[Any]:
        """The connections the candidate's sources reference, one per source that has one (the runtime
        reference-counts them once published, I14)."""
        return [s.connection for s in self.sources if s.connection is not None]


def merge(
    states: Sequence[SourceState],
    *,
    bounds: Bounds,
    built_at: float,
    reload_mode: str = "manual",
    tracked_files: int = 0,
    warnings: Sequence[str] = (),
    config_error: str | None = None,
    curation: Curation = NO_CURATION,
) -> Catalog:
    """Merge source states (in config order) into one catalog under ``curation``. Pure and
    deterministic."""
    tables: dict[EntryKind, dict[str, CatalogEntry]] = {k: {} for k in EntryKind}
    diagnostics: list[Diagnostic] = []
    total_entries = 0
    total_bytes = 0
    included: list[SourceState] = []
    for state in states:
        n = len(state.entries)
        size = state.size
        if total_entries + n > bounds.entries_per_generation or total_bytes + size > bounds.bytes_per_candidate:
            diagnostics.append(
                Diagnostic(
                    code="source_over_bounds",
                    source=state.source,
                    message=bounded(
                        f"source {state.source!r} left out: its {n} entries ({size} bytes) would exceed the "
                        f"candidate bounds ({bounds.entries_per_generation} entries, "
                        f"{bounds.bytes_per_candidate} bytes); raise the bounds or split the source",
                        bounds.diagnostic_bytes,
                    ),
                )
            )
            continue
        total_entries += n
        total_bytes += size
        included.append(state)
    for state in included:
        entries: Sequence[CatalogEntry] = state.entries
        chosen = curation.for_source(state.source)
        if chosen is not None:
            entries, found = curate_source(
                state, chosen, name_chars=bounds.name_chars, diagnostic_bytes=bounds.diagnostic_bytes
            )
            diagnostics.extend(found)
        for entry in entries:
            table = tables[entry.kind]
            winner = table.get(entry.exposed_name)
            if winner is not None:
                advice = (
                    "rename one of them (overrides: {name: {rename: ...}})"
                    if curation.renamed(entry) or curation.renamed(winner)
                    else collision_advice(entry.kind, entry.source)
                )
                diagnostics.append(
                    Diagnostic(
                        code="name_collision",
                        source=entry.source,
                        name=entry.exposed_name,
                        message=bounded(
                            f"{entry.kind} {entry.exposed_name!r} from source {entry.source!r} is shadowed by "
                            f"source {winner.source!r} (declared earlier); {advice}",
                            bounds.diagnostic_bytes,
                        ),
                    )
                )
                continue
            table[entry.exposed_name] = entry
    xref = cross_source(included, tables, diagnostic_bytes=bounds.diagnostic_bytes)
    if xref is not None:
        for kind, name in xref.withheld:
            del tables[kind][name]
        for (kind, name), flagged in xref.replaced.items():
            tables[kind][name] = flagged
        diagnostics.extend(xref.diagnostics)
    routes = MappingProxyType({k: MappingProxyType(v) for k, v in tables.items()})
    views: dict[str, Mapping[EntryKind, Mapping[str, CatalogEntry]]] = {}
    for view in curation.views:
        views[view.name], found = project_view(
            view, routes, name_chars=bounds.name_chars, diagnostic_bytes=bounds.diagnostic_bytes
        )
        diagnostics.extend(found)
    parts = [s.digest for s in states]
    if curation.digest:
        parts.append(f"curation:{curation.digest}")  # absent when nothing is curated: digests unchanged
    digest = digest_parts(parts)
    return Catalog(
        digest=digest,
        built_at=built_at,
        sources=tuple(states),
        routes=routes,
        diagnostics=tuple(diagnostics),
        reload_mode=reload_mode,
        tracked_files=tracked_files,
        warnings=tuple(warnings),
        config_error=config_error,
        by_source=MappingProxyType({s.source: s for s in states}),
        views=MappingProxyType(views),
        curation_digest=curation.digest,
    )
