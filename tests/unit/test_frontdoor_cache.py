"""The front door's definition cache: a bounded LRU (``api/frontdoor/cache.py``)."""

from __future__ import annotations

import pytest

from mcp_reconciler.api.frontdoor.cache import LRU
from mcp_reconciler.api.frontdoor.listing import DEFINITION_CACHE_ENTRIES

N = 8


def filled(n: int) -> LRU[int, str]:
    lru: LRU[int, str] = LRU(N)
    for i in range(n):
        lru.put(i, f"v{i}")
    return lru


def test_at_capacity_everything_is_kept() -> None:
    lru = filled(N)
    assert len(lru) == N
    assert [lru.get(i) for i in range(N)] == [f"v{i}" for i in range(N)]


def test_one_past_capacity_evicts_exactly_the_least_recently_used() -> None:
    lru = filled(N)
    assert lru.get(0) == "v0"  # 0 is now the most recently used; 1 is the least
    lru.put(N, f"v{N}")
    assert len(lru) == N
    assert 1 not in lru and lru.get(1) is None
    assert all(i in lru for i in (0, *range(2, N + 1)))


def test_put_of_a_present_key_refreshes_it_without_growing() -> None:
    lru = filled(N)
    lru.put(0, "new")
    assert len(lru) == N and lru.get(0) == "new"
    lru.put(N, f"v{N}")
    assert 0 in lru and 1 not in lru


def test_falsy_values_are_cached() -> None:
    """An empty input schema (``{}``) is a cached answer, not a miss."""
    lru: LRU[str, dict[str, object]] = LRU(2)
    lru.put("k", {})
    assert lru.get("k") == {}
    lru.put("a", {"x": 1})
    lru.get("k")
    lru.put("b", {"y": 2})
    assert "k" in lru and "a" not in lru


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError):
        LRU(0)


def test_the_front_door_cache_is_bounded_above_a_full_catalog() -> None:
    from mcp_reconciler.reconciler.bounds import Bounds

    assert 2 * Bounds().entries_per_generation <= DEFINITION_CACHE_ENTRIES
