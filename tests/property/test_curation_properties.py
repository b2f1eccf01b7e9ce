"""Property tests of catalog curation (issue 27, ADR 0026), over generated sources (tools, prompts,
resources with overlapping names) and generated curations (allow/deny globs, renames, views):

- curation is a pure function of (the sources' entries, the curation config): merging the same
  inputs again gives the same digest, the same routing tables and the same views;
- a denied name is absent from every projection: the catalog's routing table and every view's;
- a rename round-trips: the served name routes to the entry whose upstream name (what calls,
  reads and ``prompts/get`` are forwarded under) is the original, with the same definition
  digest, and the provenance ``_meta`` names the original;
- a view never serves an entry the catalog does not serve, nor one of a source it does not take."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.catalog import make_entry, merge
from mcp_reconciler.reconciler.curation import Curation, NameFilter, SourceCuration, ViewSpec
from mcp_reconciler.reconciler.metadata import PROVENANCE_META
from mcp_reconciler.reconciler.model import CatalogEntry, EntryKind, SourceSpec, SourceState

T, P, R = EntryKind.TOOL, EntryKind.PROMPT, EntryKind.RESOURCE
SOURCES = ("a", "b", "c")
NAMES = st.sampled_from(["get", "get_time", "set", "read_file", "read_media", "x", "echo", "add"])
URIS = st.sampled_from(["note://1", "note://2", "file:///x", "test://a"])
PATTERNS = st.one_of(NAMES, st.sampled_from(["*", "get*", "read_*", "?et", "[gs]et", "*time", "note://*", "zzz"]))
SERVED = st.sampled_from(["now", "get", "a__get", "b__x", "renamed", "same", "ok.name", "bad name"])
FILTERS = st.builds(
    NameFilter, allow=st.lists(PATTERNS, max_size=2).map(tuple), deny=st.lists(PATTERNS, max_size=3).map(tuple)
)


@st.composite
def sources(draw: Any) -> list[SourceState]:
    out = []
    for name in SOURCES:
        sp = SourceSpec(name=name, transport={"kind": "fake"}, prefix=draw(st.sampled_from([None, "", "p", name])))
        entries = [make_entry(sp, T, t, {"name": t, "inputSchema": {"type": "object"}}) for t in draw(st.sets(NAMES))]
        entries += [make_entry(sp, P, p, {"name": p}) for p in draw(st.sets(NAMES, max_size=3))]
        entries += [make_entry(sp, R, u, {"uri": u, "name": u}) for u in draw(st.sets(URIS, max_size=2))]
        out.append(SourceState(source=name, spec_digest=sp.digest, entries=tuple(entries), built_at=0.0))
    return out


@st.composite
def curations(draw: Any) -> Curation:
    per = {}
    for name in draw(st.sets(st.sampled_from(SOURCES))):
        filters = draw(st.dictionaries(st.sampled_from([T, P, R]), FILTERS, max_size=3))
        renames = draw(st.dictionaries(NAMES, SERVED, max_size=3))
        per[name] = SourceCuration(filters=filters, renames=renames)
    views = []
    for i in range(draw(st.integers(0, 2))):
        views.append(
            ViewSpec(
                name=f"v{i}",
                sources=tuple(draw(st.sets(st.sampled_from(SOURCES)))),
                filters=draw(st.dictionaries(st.sampled_from([T, P, R]), FILTERS, max_size=2)),
                renames=draw(st.dictionaries(SERVED, SERVED, max_size=2)),
            )
        )
    return Curation(sources=per, views=tuple(views))


def tables(catalog: Any) -> list[tuple[str | None, dict[EntryKind, dict[str, CatalogEntry]]]]:
    out: list[tuple[str | None, dict[EntryKind, dict[str, CatalogEntry]]]] = [
        (None, {k: dict(v) for k, v in catalog.routes.items()})
    ]
    out += [(name, {k: dict(v) for k, v in routes.items()}) for name, routes in catalog.views.items()]
    return out


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(states=sources(), curation=curations())
def test_curation_is_a_pure_function_of_entries_and_config(states: list[SourceState], curation: Curation) -> None:
    one = merge(states, bounds=Bounds(), built_at=0.0, curation=curation)
    two = merge(list(states), bounds=Bounds(), built_at=1.0, curation=curation)
    assert one.digest == two.digest
    assert [(n, {k: {s: e.raw for s, e in t.items()} for k, t in r.items()}) for n, r in tables(one)] == [
        (n, {k: {s: e.raw for s, e in t.items()} for k, t in r.items()}) for n, r in tables(two)
    ]
    assert [(d.code, d.message) for d in one.diagnostics] == [(d.code, d.message) for d in two.diagnostics]


@SETTINGS
@given(states=sources(), curation=curations())
def test_denied_names_are_absent_from_every_projection(states: list[SourceState], curation: Curation) -> None:
    catalog = merge(states, bounds=Bounds(), built_at=0.0, curation=curation)
    for view_name, routes in tables(catalog):
        view = curation.view(view_name) if view_name is not None else None
        for kind, table in routes.items():
            for served, entry in table.items():
                chosen = curation.for_source(entry.source)
                if chosen is not None:
                    assert chosen.filter(kind).admits(entry.upstream_name), (view_name, served)
                if view is not None:
                    assert not view.sources or entry.source in view.sources
                    catalog_name = next(
                        n
                        for n, e in catalog.routes[kind].items()
                        if e.upstream_name == entry.upstream_name and e.source == entry.source
                    )
                    assert view.filter(kind).admits(catalog_name)


@SETTINGS
@given(states=sources(), curation=curations())
def test_a_rename_round_trips_to_the_upstreams_name(states: list[SourceState], curation: Curation) -> None:
    catalog = merge(states, bounds=Bounds(), built_at=0.0, curation=curation)
    plain = merge(states, bounds=Bounds(), built_at=0.0)
    originals = {(e.source, e.kind, e.upstream_name): e for s in states for e in s.entries}
    for _view, routes in tables(catalog):
        for kind, table in routes.items():
            for served, entry in table.items():
                assert entry.exposed_name == served  # what lists show is what routes
                original = originals[(entry.source, kind, entry.upstream_name)]
                assert entry.digest == original.digest  # drift (I10) sees the upstream's definition
                meta = json.loads(entry.raw)["_meta"][PROVENANCE_META]
                if served != original.exposed_name:
                    assert kind in (T, P) and meta["upstream_name"] == entry.upstream_name
                else:
                    assert "upstream_name" not in meta
    # Without curation nothing is renamed, and nothing is left out but collisions.
    assert all(e.exposed_name == n for t in plain.routes.values() for n, e in t.items())
