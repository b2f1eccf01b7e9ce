"""Curating the catalog (issue 27, ADR 0026): per-source allow/deny and renames, and named views.

Curation is a pure function of (the sources' listed entries, the curation config). It runs in
``catalog.merge``, where the listed entries enter a candidate, not in the listing: a source's
listing (``SourceState``) keeps every valid entry its upstream offers, so an edit that only
changes curation re-reads nothing, reconnects nothing and respawns nothing — the next cycle
merges the same states under the new curation and, because the curation digest is part of the
catalog digest, publishes one new revision (I3). A no-op edit changes no digest and publishes
nothing.

* **Filters** (``allow`` / ``deny``: exact names or globs, per kind) are evaluated on the
  upstream's own names (a tool's or prompt's name, a resource's URI, a template's URI
  template). With an ``allow`` list only matching entries are kept; ``deny`` then removes what
  it matches. A denied entry never enters a routing table, so no session can list or call it,
  whatever it was granted.
* **Renames** give a tool or prompt its served name outright (no prefix is added). The entry
  keeps its upstream name (calls and ``prompts/get`` are forwarded under it) and its definition
  digest (drift, I10, is unchanged); its provenance ``_meta`` gains ``upstream_name``.
* **Views** are projections of the one merged routing table: the entries of the sources a view
  takes, its own allow/deny evaluated on the names the gateway serves, its own renames. A view
  does not change what the catalog is (revisions stay gateway-wide, I19); sessions bound to a
  view resolve and list through its table (``Generation.routes_for``, used by the authority).

Diagnostics (never errors): a deny pattern that matches nothing, an allow list that leaves
nothing, a rename whose entry the source does not list, and a rename that is not a valid name
for the gateway's bounds (the entry is then served under its default name)."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from mcp_reconciler.reconciler.digest import canonical_json, digest_json
from mcp_reconciler.reconciler.model import CatalogEntry, Diagnostic, EntryKind, SourceState, SourceStatus

__all__ = [
    "RENAMABLE_KINDS",
    "Curation",
    "NameFilter",
    "SourceCuration",
    "ViewSpec",
    "curate_source",
    "glob_problem",
    "project_view",
    "renamed",
]

#: Kinds whose served name may be renamed (resources and templates are URIs: see ``uri_prefix``).
RENAMABLE_KINDS = (EntryKind.TOOL, EntryKind.PROMPT)
_VALID_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_GLOB_BAD = re.compile(r"[\s\x00-\x1f\x7f]")
_PROVENANCE_META = "io.mcp-reconciler/provenance"  # metadata.PROVENANCE_META (no import cycle)
EMPTY_ROUTES: Mapping[EntryKind, Mapping[str, CatalogEntry]] = MappingProxyType(
    {k: MappingProxyType({}) for k in EntryKind}
)


def glob_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a usable name glob (``None`` when it is): non-empty, at most 2,048
    characters, no whitespace or control characters, every ``[`` closed by a ``]`` (fnmatch would
    otherwise match an unclosed ``[`` literally, silently)."""
    if not pattern:
        return "a pattern must not be empty"
    if len(pattern) > 2048:
        return "a pattern is at most 2048 characters"
    if _GLOB_BAD.search(pattern):
        return "a pattern must not contain whitespace or control characters"
    i, n = 0, len(pattern)
    while i < n:  # fnmatch's own reading of a character class
        i += 1
        if pattern[i - 1] != "[":
            continue
        j = i
        if j < n and pattern[j] == "!":
            j += 1
        if j < n and pattern[j] == "]":
            j += 1
        while j < n and pattern[j] != "]":
            j += 1
        if j >= n:
            return "unclosed '[' in the pattern (write [[] for a literal '[')"
        i = j + 1
    return None


@dataclass(frozen=True, slots=True)
class NameFilter:
    """``allow`` and ``deny`` lists of exact names or globs (``fnmatch``, case-sensitive)."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    _allow: re.Pattern[str] | None = field(default=None, init=False, compare=False, repr=False)
    _deny: tuple[tuple[str, re.Pattern[str]], ...] = field(default=(), init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow", tuple(self.allow))
        object.__setattr__(self, "deny", tuple(self.deny))
        if self.allow:
            joined = "|".join(f"(?:{fnmatch.translate(p)})" for p in self.allow)
            object.__setattr__(self, "_allow", re.compile(joined))
        object.__setattr__(self, "_deny", tuple((p, re.compile(fnmatch.translate(p))) for p in self.deny))

    @property
    def active(self) -> bool:
        """Whether this filter removes anything at all (an empty filter admits every name)."""
        return bool(self.allow or self.deny)

    def admits(self, name: str) -> bool:
        """Whether ``name`` passes: matched by ``allow`` when there is one, and by no ``deny``."""
        if self._allow is not None and self._allow.match(name) is None:
            return False
        return not any(rx.match(name) for _p, rx in self._deny)

    def denied_by(self, name: str) -> list[str]:
        """The deny patterns that match ``name``."""
        return [p for p, rx in self._deny if rx.match(name)]

    def as_json(self) -> dict[str, Any]:
        """Plain data for digests."""
        return {"allow": list(self.allow), "deny": list(self.deny)}


_NO_FILTER = NameFilter()


def _filters(value: Mapping[EntryKind, NameFilter] | None) -> Mapping[EntryKind, NameFilter]:
    return MappingProxyType({k: f for k, f in (value or {}).items() if f.active})


@dataclass(frozen=True, slots=True)
class SourceCuration:
    """One source's curation: ``filters`` per kind on upstream names, and ``renames`` (upstream
    name of a tool or prompt → its served name)."""

    filters: Mapping[EntryKind, NameFilter] = field(default_factory=dict)
    renames: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "filters", _filters(self.filters))
        object.__setattr__(self, "renames", MappingProxyType(dict(self.renames)))

    @property
    def empty(self) -> bool:
        """Whether this curation changes nothing."""
        return not self.filters and not self.renames

    def filter(self, kind: EntryKind) -> NameFilter:
        """The filter of ``kind`` (an empty one when none is configured)."""
        return self.filters.get(kind, _NO_FILTER)

    def as_json(self) -> dict[str, Any]:
        """Plain data for digests."""
        return {
            "filters": {k.value: f.as_json() for k, f in sorted(self.filters.items())},
            "renames": dict(sorted(self.renames.items())),
        }


@dataclass(frozen=True, slots=True)
class ViewSpec:
    """A named view (a virtual server at ``/mcp/<name>``): the entries of ``sources`` (every source
    when empty), then ``filters`` and ``renames`` on the names the gateway serves."""

    name: str
    sources: tuple[str, ...] = ()
    filters: Mapping[EntryKind, NameFilter] = field(default_factory=dict)
    renames: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "filters", _filters(self.filters))
        object.__setattr__(self, "renames", MappingProxyType(dict(self.renames)))

    def filter(self, kind: EntryKind) -> NameFilter:
        """The filter of ``kind`` (an empty one when none is configured)."""
        return self.filters.get(kind, _NO_FILTER)

    def as_json(self) -> dict[str, Any]:
        """Plain data for digests."""
        return {
            "name": self.name,
            "sources": list(self.sources),
            "filters": {k.value: f.as_json() for k, f in sorted(self.filters.items())},
            "renames": dict(sorted(self.renames.items())),
        }


@dataclass(frozen=True, slots=True)
class Curation:
    """The whole curation config: per-source curations and the views, in config order. ``digest``
    is ``""`` when nothing is curated (so catalogs without curation keep the digests they had)."""

    sources: Mapping[str, SourceCuration] = field(default_factory=dict)
    views: tuple[ViewSpec, ...] = ()
    digest: str = field(default="", init=False)

    def __post_init__(self) -> None:
        kept = {name: c for name, c in self.sources.items() if not c.empty}
        object.__setattr__(self, "sources", MappingProxyType(kept))
        object.__setattr__(self, "views", tuple(self.views))
        if kept or self.views:
            data = {
                "sources": {name: c.as_json() for name, c in sorted(kept.items())},
                "views": [v.as_json() for v in self.views],
            }
            object.__setattr__(self, "digest", digest_json(data))

    def for_source(self, name: str) -> SourceCuration | None:
        """The curation of source ``name`` (``None``: served as listed)."""
        return self.sources.get(name)

    def renamed(self, entry: CatalogEntry) -> bool:
        """Whether ``entry`` is served under a rename of its source's curation."""
        chosen = self.sources.get(entry.source)
        return chosen is not None and chosen.renames.get(entry.upstream_name) == entry.exposed_name

    def view(self, name: str) -> ViewSpec | None:
        """The view called ``name``, if configured."""
        for view in self.views:
            if view.name == name:
                return view
        return None


NO_CURATION = Curation()


def renamed(entry: CatalogEntry, name: str) -> CatalogEntry:
    """``entry`` served as ``name``: same upstream name, definition digest and provenance, its
    provenance ``_meta`` naming the upstream's original name (``upstream_name``)."""
    data = json.loads(entry.raw)
    meta = dict(data.get("_meta") or {})
    prov = dict(meta.get(_PROVENANCE_META) or {})
    prov["upstream_name"] = entry.upstream_name
    meta[_PROVENANCE_META] = prov
    data["_meta"] = meta
    return replace(entry, exposed_name=name, raw=canonical_json(data))


def _diag(code: str, source: str | None, name: str | None, message: str, limit: int) -> Diagnostic:
    raw = message.encode()
    if len(raw) > limit:
        message = raw[: max(0, limit - 3)].decode(errors="ignore") + "..."
    return Diagnostic(code=code, source=source, name=name, message=message)


def curate_source(
    state: SourceState, curation: SourceCuration, *, name_chars: int, diagnostic_bytes: int
) -> tuple[list[CatalogEntry], list[Diagnostic]]:
    """The entries ``state`` contributes under ``curation`` (in listing order) and the curation
    diagnostics. Pure: equal inputs give equal outputs."""
    out: list[CatalogEntry] = []
    diags: list[Diagnostic] = []
    kept: dict[EntryKind, int] = {k: 0 for k in EntryKind}
    listed: dict[EntryKind, int] = {k: 0 for k in EntryKind}
    deny_hits: set[tuple[EntryKind, str]] = set()
    renamed_names: set[str] = set()
    source = state.source
    for entry in state.entries:
        listed[entry.kind] += 1
        flt = curation.filter(entry.kind)
        if flt.active:
            for pattern in flt.denied_by(entry.upstream_name):
                deny_hits.add((entry.kind, pattern))
            if not flt.admits(entry.upstream_name):
                continue
        kept[entry.kind] += 1
        new = curation.renames.get(entry.upstream_name) if entry.kind in RENAMABLE_KINDS else None
        if new is not None:
            renamed_names.add(entry.upstream_name)
            if not _VALID_NAME.fullmatch(new) or len(new) > name_chars:
                diags.append(
                    _diag(
                        "curation_invalid_rename",
                        source,
                        entry.upstream_name,
                        f"rename of {entry.kind} {entry.upstream_name!r} to {new!r} is not a valid name "
                        f"([A-Za-z0-9_.-], at most {name_chars} characters); served as {entry.exposed_name!r}",
                        diagnostic_bytes,
                    )
                )
            elif new != entry.exposed_name:
                entry = renamed(entry, new)
        out.append(entry)
    if state.status is SourceStatus.FAILED and not state.entries:
        return out, diags  # never listed: "matches nothing" would say nothing true
    for kind, flt in curation.filters.items():
        for pattern in flt.deny:
            if (kind, pattern) not in deny_hits:
                diags.append(
                    _diag(
                        "curation_deny_unmatched",
                        source,
                        pattern,
                        f"deny {pattern!r} of {kind.value}s matches nothing source {source!r} lists",
                        diagnostic_bytes,
                    )
                )
        if flt.allow and kept[kind] == 0:
            diags.append(
                _diag(
                    "curation_allow_empty",
                    source,
                    None,
                    f"the {kind.value}s allow list of source {source!r} leaves nothing (of {listed[kind]} listed)",
                    diagnostic_bytes,
                )
            )
    for upstream in sorted(set(curation.renames) - renamed_names):
        diags.append(
            _diag(
                "curation_rename_unused",
                source,
                upstream,
                f"rename of {upstream!r}: source {source!r} lists no tool or prompt by that name (or it is denied)",
                diagnostic_bytes,
            )
        )
    return out, diags


def project_view(
    view: ViewSpec,
    tables: Mapping[EntryKind, Mapping[str, CatalogEntry]],
    *,
    name_chars: int,
    diagnostic_bytes: int,
) -> tuple[Mapping[EntryKind, Mapping[str, CatalogEntry]], list[Diagnostic]]:
    """``view``'s routing table over the merged ``tables`` (served name → entry, renamed where the
    view renames) and its diagnostics. Pure."""
    sources = frozenset(view.sources) if view.sources else None
    out: dict[EntryKind, dict[str, CatalogEntry]] = {k: {} for k in EntryKind}
    diags: list[Diagnostic] = []
    deny_hits: set[tuple[EntryKind, str]] = set()
    used: set[str] = set()
    where = f"view {view.name!r}"
    for kind in EntryKind:
        flt = view.filter(kind)
        for name, entry in tables[kind].items():
            if sources is not None and entry.source not in sources:
                continue
            if flt.active:
                for pattern in flt.denied_by(name):
                    deny_hits.add((kind, pattern))
                if not flt.admits(name):
                    continue
            served = name
            new = view.renames.get(name) if kind in RENAMABLE_KINDS else None
            if new is not None:
                used.add(name)
                if not _VALID_NAME.fullmatch(new) or len(new) > name_chars:
                    diags.append(
                        _diag(
                            "curation_invalid_rename",
                            None,
                            name,
                            f"{where}: rename of {name!r} to {new!r} is not a valid name; served as {name!r}",
                            diagnostic_bytes,
                        )
                    )
                else:
                    served = new
            winner = out[kind].get(served)
            if winner is not None:
                diags.append(
                    _diag(
                        "name_collision",
                        entry.source,
                        served,
                        f"{where}: {kind} {served!r} from source {entry.source!r} is shadowed by source "
                        f"{winner.source!r}; rename one of them",
                        diagnostic_bytes,
                    )
                )
                continue
            out[kind][served] = entry if served == entry.exposed_name else renamed(entry, served)
    for kind, flt in view.filters.items():
        for pattern in flt.deny:
            if (kind, pattern) not in deny_hits:
                diags.append(
                    _diag(
                        "curation_deny_unmatched",
                        None,
                        pattern,
                        f"{where}: deny {pattern!r} of {kind.value}s matches nothing",
                        diagnostic_bytes,
                    )
                )
        if flt.allow and not out[kind]:
            diags.append(
                _diag(
                    "curation_allow_empty",
                    None,
                    None,
                    f"{where}: the {kind.value}s allow list leaves nothing",
                    diagnostic_bytes,
                )
            )
    for name in sorted(set(view.renames) - used):
        diags.append(
            _diag(
                "curation_rename_unused",
                None,
                name,
                f"{where}: rename of {name!r}: no such name in the view",
                diagnostic_bytes,
            )
        )
    routes = MappingProxyType({k: MappingProxyType(v) for k, v in out.items()})
    return routes, diags


def view_counts(routes: Mapping[EntryKind, Mapping[str, CatalogEntry]]) -> dict[str, int]:
    """Entry counts of a routing table by kind (status, console)."""
    return {k.value: len(routes[k]) for k in EntryKind}


def check_names(names: Iterable[str]) -> Sequence[str]:
    """The names of ``names`` that are not valid served names (config checks)."""
    return [n for n in names if not _VALID_NAME.fullmatch(n)]
