"""The per-generation tool search index and search mode in the authority (issue 31, ADR 0029)."""

from __future__ import annotations

import json
import tracemalloc
from dataclasses import replace

from mcp_reconciler.reconciler.authority import Authority, DriftPolicy, GrantPolicy
from mcp_reconciler.reconciler.discovery import DiscoveryConfig, DiscoveryMode, DiscoveryPolicy
from mcp_reconciler.reconciler.errors import UnavailableNameError
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import CatalogEntry, EntryKind
from mcp_reconciler.reconciler.search_index import LIMIT_MAX, SearchIndex, one_line, tokens
from tests.support.fakes import catalog, state
from tests.support.search_catalog import catalog as big_catalog
from tests.support.search_catalog import recall_at

T = EntryKind.TOOL
SEARCH = DiscoveryPolicy(mode=DiscoveryMode.SEARCH)


def entry(
    name: str, description: str = "", title: str | None = None, props: dict[str, str] | None = None
) -> CatalogEntry:
    data: dict[str, object] = {"name": name, "description": description}
    if title is not None:
        data["title"] = title
    data["inputSchema"] = {
        "type": "object",
        "properties": {p: {"type": "string", "description": d} for p, d in (props or {}).items()},
    }
    return CatalogEntry(
        kind=T, exposed_name=name, upstream_name=name, source="s", raw=json.dumps(data).encode(), digest=name
    )


def index(*entries: CatalogEntry) -> SearchIndex:
    return SearchIndex.build({e.exposed_name: e for e in entries})


def gen(revision: int, tools: list[str]) -> Generation:
    return Generation(revision=revision, catalog=catalog(state("a", tools)), published_at=0.0)


def test_names_split_at_snake_camel_dots_and_double_underscores() -> None:
    assert tokens("github__createPullRequest") == ["github", "create", "pull", "request"]
    assert tokens("jira.list_issues") == ["jira", "list", "issue"]
    assert tokens("HTTPServer_v2") == ["http", "server", "v2"]
    assert tokens("the files I want") == ["file"]  # stop words dropped, plural stemmed


def test_ranking_prefers_name_matches_and_reads_titles_descriptions_and_parameters() -> None:
    ix = index(
        entry("send_email", "Deliver a message to an inbox."),
        entry("read_inbox", "Read mail; an email is mentioned here."),
        entry("weather", "Forecast.", title="Weather lookup", props={"city": "the town to forecast"}),
    )
    assert ix.search("email", 5)[0].name == "send_email"
    assert [h.name for h in ix.search("town", 5)] == ["weather"]  # a parameter's description
    assert [h.name for h in ix.search("lookup", 5)] == ["weather"]  # the title
    hit = ix.search("lookup", 1)[0]
    assert hit.title == "Weather lookup" and hit.description == "Forecast."
    assert ix.search("zebra", 5) == []


def test_admit_filters_before_limit_and_limit_is_clamped() -> None:
    ix = index(*(entry(f"tool_{i}", "frobnicate the widget") for i in range(100)))
    got = ix.search("frobnicate", 3, admit=lambda name: name.endswith("7"))
    assert [h.name for h in got] == ["tool_17", "tool_27", "tool_37"]  # ties by name, only admitted
    assert len(ix.search("frobnicate", 10_000)) == LIMIT_MAX
    assert len(ix.search("frobnicate", 0)) == 1


def test_one_line_cuts_at_the_first_line() -> None:
    assert one_line("First line.\nSecond") == "First line."
    assert one_line("x" * 300).endswith("…") and len(one_line("x" * 300)) == 200


def test_recall_at_5_on_the_labelled_queries_over_2000_tools() -> None:
    tools = {}
    for t in big_catalog(2000):
        e = entry(t["name"], t["description"], props=t["properties"])
        tools[e.exposed_name] = e
    ix = SearchIndex.build(tools)
    recall, misses = recall_at(5, lambda q, k: [h.name for h in ix.search(q, k)])
    print(f"\nsearch recall@5 = {recall:.2f} over {len(tools)} tools ({len(misses)} misses: {misses})")
    assert recall >= 0.9, misses


def test_the_index_is_built_once_per_generation_and_view_and_shared() -> None:
    g = gen(1, ["x", "y"])
    auth = Authority()
    auth.set_discovery(SEARCH)
    a = auth.create("o", g)
    b = auth.create("o", g)
    auth.find(a, g, "x", 5)
    first = g.search_index(None)
    auth.find(b, g, "y", 5)
    assert g.search_index(None) is first  # one index, shared by both sessions
    [report] = g.search.reports()
    assert report.view is None and report.documents == 2 and report.bytes > 0 and report.build_ms >= 0


def test_sessions_in_search_mode_add_no_index_memory() -> None:
    g = gen(1, [f"t{i}" for i in range(200)])
    auth = Authority()
    auth.set_discovery(SEARCH)
    first = auth.create("o", g)
    auth.find(first, g, "t1", 5)  # builds the index
    sessions = [auth.create("o", g) for _ in range(201)]
    tracemalloc.start()
    auth.find(sessions[0], g, "t5", 5)  # warm: first-call allocations are not per session
    before = tracemalloc.take_snapshot()
    for s in sessions[1:]:
        auth.find(s, g, "t5", 5)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(
        stat.size_diff for stat in after.compare_to(before, "filename") if "search_index" in str(stat.traceback)
    )
    # 200 sessions: a few bytes each (allocator free lists), nothing near an index of their own.
    assert grown < 64 * 200 < g.search_index(None).size_bytes, grown
    assert all(g.search_index(None) is g.search_index(None) for _ in range(2))


def test_search_mode_lists_found_and_pinned_tools_only() -> None:
    g = gen(1, ["alpha", "beta", "gamma"])
    auth = Authority()
    auth.set_discovery(replace(SEARCH, always_visible=frozenset({"a__gamma"})))
    s = auth.create("o", g)
    assert auth.searching(s)
    assert [e.exposed_name for e in auth.view(s, g).entries[T]] == ["a__gamma"]
    found = auth.find(s, g, "alpha", 5)
    assert [h.name for h in found.hits] == ["a__alpha"] and found.added == ("a__alpha",)
    assert [e.exposed_name for e in auth.view(s, g).entries[T]] == ["a__alpha", "a__gamma"]
    # A session in mode all lists every granted tool and keeps no found set.
    other = auth.create("o", g, discovery="all")
    assert not auth.searching(other)
    assert len(auth.view(other, g).entries[T]) == 3
    assert auth.find(other, g, "alpha", 5).added == () and other.found == ()


def test_found_set_is_bounded_oldest_dropped_and_announced() -> None:
    g = gen(1, ["one", "two", "three"])
    auth = Authority()
    auth.set_discovery(replace(SEARCH, found_max=2))
    s = auth.create("o", g)
    auth.find(s, g, "one", 1)
    auth.find(s, g, "two", 1)
    third = auth.find(s, g, "three", 1)
    assert third.dropped == ("a__one",) and s.found == ("a__two", "a__three")


def test_view_and_session_modes_override_the_default() -> None:
    policy = DiscoveryConfig.model_validate({"mode": "all"}).policy({"big": "search", "small": None})
    assert policy.mode_of(None, "big") is DiscoveryMode.SEARCH
    assert policy.mode_of(None, "small") is DiscoveryMode.ALL
    assert policy.mode_of("all", "big") is DiscoveryMode.ALL
    assert DiscoveryConfig.model_validate("search").mode == "search"


def test_I21_search_returns_only_names_the_session_could_call() -> None:
    g1 = gen(1, ["alpha", "beta"])
    auth = Authority(drift_policy=DriftPolicy.QUARANTINE)
    auth.set_discovery(SEARCH)
    s = auth.create("o", g1, policy=GrantPolicy.EXPLICIT, names=["a__alpha"])
    assert [h.name for h in auth.find(s, g1, "alpha beta", 5).hits] == ["a__alpha"]  # beta: not granted
    # Drifted under quarantine: neither callable nor found.
    g2 = Generation(revision=2, catalog=catalog(state("a", ["alpha", "beta"], version="v2")), published_at=0.0)
    assert auth.find(s, g2, "alpha", 5).hits == ()


def test_I21_a_publication_removing_a_found_tool_makes_it_currently_unavailable() -> None:
    g1 = gen(1, ["alpha", "beta"])
    auth = Authority()
    auth.set_discovery(SEARCH)
    s = auth.create("o", g1)
    auth.find(s, g1, "alpha", 5)
    g2 = gen(2, ["beta"])
    assert auth.view(s, g2).entries[T] == ()  # no longer listed
    try:
        auth.resolve(s, g2, T, "a__alpha")
    except UnavailableNameError as exc:
        assert exc.retryable
    else:
        raise AssertionError("a removed found tool must be currently unavailable")
    assert s.found == ("a__alpha",)  # still found: it comes back if the name reappears
    assert [e.exposed_name for e in auth.view(s, gen(3, ["alpha"])).entries[T]] == ["a__alpha"]
