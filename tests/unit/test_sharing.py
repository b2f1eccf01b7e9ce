"""``reconciler/sharing.py``: equal grant maps and views are one object shared by their sessions
(issue 26, idle sessions), and sharing never lets one session's grants reach another (I9)."""

from __future__ import annotations

import pytest

from mcp_reconciler.reconciler import sharing
from mcp_reconciler.reconciler.authority import Authority, GrantPolicy
from mcp_reconciler.reconciler.errors import UnknownNameError
from mcp_reconciler.reconciler.model import EntryKind
from mcp_reconciler.reconciler.sharing import GrantMaps, ViewMemo
from tests.unit.test_authority import gen  # one source "a" with these tools

T = EntryKind.TOOL


def test_I9_equal_grants_share_one_map_and_a_grant_to_one_session_never_reaches_another() -> None:
    auth = Authority()
    g = gen(1, ["x", "y"])
    one, two = auth.create("o", g), auth.create("p", g)
    assert one.grants is two.grants  # one map for the two
    none = auth.create("o", g, policy=GrantPolicy.NONE)
    auth.grant(none, ["a__x"], g)
    assert dict(none.grants) == {"tool:a__x": g.catalog.routes[T]["a__x"].digest}
    assert auth.revoke(one, ["a__y"]) == ["tool:a__y"]
    assert "tool:a__y" not in one.grants and "tool:a__y" in two.grants  # two's map is untouched
    assert auth.resolve(two, g, T, "a__y").entry.exposed_name == "a__y"
    with pytest.raises(UnknownNameError):
        auth.resolve(one, g, T, "a__y")
    assert one.grants is none.grants  # equal again: shared again


def test_I9_equal_sessions_share_one_view_and_a_view_shows_only_its_own_grants() -> None:
    auth = Authority()
    g = gen(1, ["x", "y"])
    one, two = auth.create("o", g), auth.create("p", g)
    assert auth.view(one, g) is auth.view(two, g)
    auth.revoke(one, ["a__y"])
    assert [e.exposed_name for e in auth.view(one, g).entries[T]] == ["a__x"]
    assert [e.exposed_name for e in auth.view(two, g).entries[T]] == ["a__x", "a__y"]
    narrow = auth.create("q", g, policy=GrantPolicy.EXPLICIT, names=["a__x"])
    assert narrow.grants is one.grants and auth.view(narrow, g) is auth.view(one, g)
    g2 = gen(2, ["x", "y"])  # another generation: another view, though equal in content
    assert auth.view(two, g2) is not auth.view(two, g) and auth.view(two, g2).revision == 2


def test_I10_same_names_granted_at_other_definitions_are_not_shared() -> None:
    auth = Authority()
    old, new = gen(1, ["x"]), gen(2, ["x"], version="rug pull")
    before, after = auth.create("o", old), auth.create("p", new)
    assert before.grants is not after.grants
    assert auth.resolve(before, new, T, "a__x").drifted is True  # granted the old definition
    assert auth.resolve(after, new, T, "a__x").drifted is False
    assert auth.view(before, new) is not auth.view(after, new)
    assert auth.view(before, new).drifted == {"tool:a__x"} and auth.view(after, new).drifted == frozenset()


def test_grant_maps_are_bounded_at_n_and_n_plus_1() -> None:
    maps = GrantMaps()
    made = [maps.share({f"tool:t{i}": "d"}) for i in range(sharing.GRANT_MAPS)]
    assert len(maps) == sharing.GRANT_MAPS  # N: all remembered
    assert maps.share({"tool:t0": "d"}) is made[0]
    maps.share({"tool:new": "d"})  # N + 1: the least recently used (t1; t0 was just used) is forgotten
    assert len(maps) == sharing.GRANT_MAPS
    assert maps.share({"tool:t0": "d"}) is made[0]
    again = maps.share({"tool:t1": "d"})
    assert again == made[1] and again is not made[1]  # equal, no longer shared (still correct)
    assert maps.share({}) is sharing.NO_GRANTS


def test_view_memo_is_bounded_per_generation_at_n_and_n_plus_1() -> None:
    memo: ViewMemo[str] = ViewMemo()
    first, second = object(), object()
    grants = [sharing.GrantMaps().share({f"tool:t{i}": "d"}) for i in range(sharing.VIEWS + 1)]
    for i in range(sharing.VIEWS):
        memo.put(first, grants[i], None, f"v{i}")
    assert memo.get(first, grants[0], None) == "v0"  # N: all remembered
    memo.put(first, grants[sharing.VIEWS], None, "last")  # N + 1: the oldest goes
    assert memo.get(first, grants[0], None) is None and memo.get(first, grants[1], None) == "v1"
    assert memo.get(first, dict(grants[1]), None) is None  # by the map's identity, not its content
    memo.put(second, grants[1], None, "new")  # another generation: the first one's are dropped
    assert memo.get(first, grants[1], None) is None and memo.get(second, grants[1], None) == "new"
