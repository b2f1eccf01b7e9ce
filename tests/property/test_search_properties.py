"""Search mode's guarantees under generated catalogs, grants and queries (issue 31, I21)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_reconciler.reconciler.authority import Authority, DriftPolicy, GrantPolicy
from mcp_reconciler.reconciler.discovery import DiscoveryMode, DiscoveryPolicy
from mcp_reconciler.reconciler.errors import UnavailableNameError
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import EntryKind
from tests.support.fakes import catalog, state

T = EntryKind.TOOL
WORDS = ["send", "mail", "list", "file", "get", "user", "create", "issue", "delete", "page"]
names = st.lists(
    st.builds(
        lambda a, b, sep: f"{a}{sep}{b}",
        st.sampled_from(WORDS),
        st.sampled_from(WORDS),
        st.sampled_from(["_", "__", ""]),
    ),
    min_size=1,
    max_size=25,
    unique=True,
)
queries = st.lists(st.sampled_from([*WORDS, "nothing", "mailing", "files"]), min_size=1, max_size=4).map(" ".join)


def gen(revision: int, tools: list[str], version: str = "") -> Generation:
    return Generation(revision=revision, catalog=catalog(state("a", tools, version=version)), published_at=0.0)


@st.composite
def worlds(draw: Any) -> tuple[Authority, Any, Generation, Generation]:
    tools = draw(names)
    granted = draw(st.lists(st.sampled_from(tools), unique=True))
    policy = DiscoveryPolicy(mode=DiscoveryMode.SEARCH, found_max=draw(st.integers(1, 8)))
    auth = Authority(drift_policy=draw(st.sampled_from(list(DriftPolicy))))
    auth.set_discovery(policy)
    g1 = gen(1, tools)
    session = auth.create("o", g1, policy=GrantPolicy.EXPLICIT, names=[f"a__{t}" for t in granted])
    kept = draw(st.lists(st.sampled_from(tools), unique=True))
    drifted = draw(st.booleans())
    g2 = gen(2, kept, version="v2" if drifted else "")
    return auth, session, g1, g2


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.lists(queries, min_size=1, max_size=6), st.integers(1, 10))
def test_I21_search_never_returns_a_name_the_session_could_not_call(world: Any, qs: list[str], limit: int) -> None:
    auth, session, g1, g2 = world
    for generation in (g1, g2):
        for q in qs:
            for hit in auth.find(session, generation, q, limit).hits:
                # Callable: resolve succeeds (no unknown, unavailable or quarantined error).
                assert auth.resolve(session, generation, T, hit.name).entry.exposed_name == hit.name


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.lists(queries, min_size=1, max_size=8), st.integers(1, 10))
def test_I21_the_found_set_only_grows_by_what_find_tools_returned(world: Any, qs: list[str], limit: int) -> None:
    auth, session, g1, _ = world
    for q in qs:
        before = set(session.found)
        found = auth.find(session, g1, q, limit)
        assert set(session.found) - before <= {h.name for h in found.hits}
        assert len(session.found) <= auth.discovery.found_max
        assert set(found.dropped) <= before | {h.name for h in found.hits}
        listed = {e.exposed_name for e in auth.view(session, g1).entries[T]}
        assert listed == set(session.found)  # search mode lists exactly what was found (no pins here)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), queries)
def test_I21_a_publication_removing_a_found_tool_makes_it_currently_unavailable(world: Any, q: str) -> None:
    auth, session, g1, g2 = world
    auth.find(session, g1, q, 10)
    for name in session.found:
        if name not in g2.tools:
            with pytest.raises(UnavailableNameError):
                auth.resolve(session, g2, T, name)
            assert name not in {e.exposed_name for e in auth.view(session, g2).entries[T]}
