"""A published generation: a catalog plus the revision it was published as (I1, I3)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mcp_reconciler.reconciler.catalog import Catalog
from mcp_reconciler.reconciler.curation import EMPTY_ROUTES
from mcp_reconciler.reconciler.digest import digest_parts
from mcp_reconciler.reconciler.events import Trigger
from mcp_reconciler.reconciler.model import CatalogEntry, Diagnostic, EntryKind, SourceState
from mcp_reconciler.reconciler.search_index import SearchIndex, SearchIndexes


@dataclass(frozen=True, slots=True)
class Generation:
    """Immutable once constructed (I1): readers share it without locks.

    ``revision`` is assigned at publication and strictly increases (I3). ``trigger`` says why
    its catalog was built (provenance only: not part of the digest)."""

    revision: int
    catalog: Catalog
    published_at: float
    trigger: Trigger = field(default_factory=Trigger)
    #: The generation's tool search indexes (ADR 0029): built once per view on first use,
    #: shared by every session, freed with the generation. Not content (no part of equality).
    search: SearchIndexes = field(default_factory=SearchIndexes, compare=False, repr=False)

    @property
    def digest(self) -> str:
        """The catalog's content digest; equal digests mean equal catalogs (I3)."""
        return self.catalog.digest

    @property
    def built_at(self) -> float:
        """Wall-clock time the catalog was assembled (not when it was published)."""
        return self.catalog.built_at

    @property
    def sources(self) -> tuple[SourceState, ...]:
        """The per-source states the catalog was merged from."""
        return self.catalog.sources

    @property
    def routes(self) -> Mapping[EntryKind, Mapping[str, CatalogEntry]]:
        """Every exposed name by kind: the read-only routing table lookups use (O(1) per name)."""
        return self.catalog.routes

    def routes_for(self, view: str | None) -> Mapping[EntryKind, Mapping[str, CatalogEntry]]:
        """The routing table a session bound to ``view`` resolves and lists through: the whole
        catalog's for ``None``, the view's projection otherwise (empty for a view this
        generation does not have: a session of a removed view sees nothing)."""
        if view is None:
            return self.catalog.routes
        return self.catalog.views.get(view, EMPTY_ROUTES)

    def search_index(self, view: str | None) -> SearchIndex:
        """The search index over the tools of ``routes_for(view)``, built on first use."""
        return self.search.get(view, lambda: self.routes_for(view)[EntryKind.TOOL])

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        """Why entries or sources were left out or changed when the catalog was built."""
        return self.catalog.diagnostics

    @property
    def tools(self) -> Mapping[str, CatalogEntry]:
        """The tool routes: exposed tool name -> entry."""
        return self.catalog.routes[EntryKind.TOOL]

    def lookup(self, kind: EntryKind, name: str) -> CatalogEntry | None:
        """O(1) routing: exposed name → entry, or None."""
        return self.catalog.routes[kind].get(name)

    def source_state(self, name: str) -> SourceState | None:
        """O(1): the state of source ``name`` in this generation."""
        return self.catalog.by_source.get(name)


def source_digests(catalog: Catalog) -> dict[str, str]:
    """Per source, a replica-independent digest of what it serves in ``catalog``: its name,
    spec digest, status and every entry's definition digest (no connection, no mtimes)."""
    return {
        s.source: digest_parts(
            [s.source, s.spec_digest, s.status.value] + [f"{e.kind}:{e.exposed_name}:{e.digest}" for e in s.entries]
        )
        for s in catalog.sources
    }


def content_digest(catalog: Catalog) -> str:
    """A replica-independent digest of what a catalog serves (the :func:`source_digests`, in
    source order). Two replicas with the same config and upstreams agree on it, so a client
    pinned to revision N can say which catalog it means (ADR 0020). The curation digest is part
    of it (a curation edit is new content: ADR 0026)."""
    parts = list(source_digests(catalog).values())
    if catalog.curation_digest:
        parts.append(f"curation:{catalog.curation_digest}")
    return digest_parts(parts)
