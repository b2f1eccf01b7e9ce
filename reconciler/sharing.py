"""Equal per-session state shared between sessions, never copied per session (issue 26: 10,000
idle sessions within 60 MB; ADR 0038 "Idle sessions").

Most sessions a gateway holds were made the same way — the same grant policy over the same
generation — so their grant maps are equal, and so is what they see of a generation. Both are
immutable, so one object can serve every session that has that content:

- :class:`GrantMaps` hands out one read-only grant map per distinct content (keys interned),
  remembering the :data:`GRANT_MAPS` most recently made. A session keeps its map by reference;
  a map the table forgot still serves the sessions that hold it (only sharing is lost, never
  correctness), and a map no session holds is freed once the table forgets it.
- :class:`ViewMemo` remembers, for one generation at a time, the :class:`View` of each distinct
  (grant map, named view, listed tools, drift policy): every input of ``Authority.view``, so a
  remembered view is exactly the one it would build. At most :data:`VIEWS` per generation; a
  newer generation starts afresh (the memo never keeps an older generation alive past the next
  view asked of another one).

Bounds are per gateway, not per session: what an outsider's sessions can make it hold is at most
``GRANT_MAPS`` maps and ``VIEWS`` views, each no bigger than one session's own."""

from __future__ import annotations

import sys
from collections.abc import Hashable, Mapping
from types import MappingProxyType
from typing import Generic, TypeVar

#: Distinct grant maps remembered for sharing (the most recently made ones).
GRANT_MAPS = 64
#: Distinct views remembered per generation.
VIEWS = 256

#: The grant map of a session granted nothing (shared by all of them).
NO_GRANTS: Mapping[str, str] = MappingProxyType({})

V = TypeVar("V")


class GrantMaps:
    """One read-only grant map per distinct content (module docstring). Single-loop, no lock."""

    __slots__ = ("_maps",)

    def __init__(self) -> None:
        self._maps: dict[int, Mapping[str, str]] = {}  # content hash -> map, oldest first

    def share(self, grants: dict[str, str]) -> Mapping[str, str]:
        """The shared read-only map equal to ``grants`` (``grants`` itself becomes it on a miss, so
        the caller must not keep or change it afterwards). Keys are interned: a key held by many
        distinct maps is one string. O(len(grants))."""
        if not grants:
            return NO_GRANTS
        h = hash(frozenset(grants.items()))
        hit = self._maps.get(h)
        if hit is not None and hit == grants:
            del self._maps[h]  # most recently used last
            self._maps[h] = hit
            return hit
        shared = MappingProxyType({sys.intern(k): v for k, v in grants.items()})
        self._maps.pop(h, None)
        self._maps[h] = shared
        if len(self._maps) > GRANT_MAPS:
            del self._maps[next(iter(self._maps))]
        return shared

    def __len__(self) -> int:
        return len(self._maps)


class ViewMemo(Generic[V]):
    """Views of one generation by their inputs (module docstring). Single-loop, no lock."""

    __slots__ = ("_generation", "_views")

    def __init__(self) -> None:
        self._generation: object | None = None
        # key -> (the grant map the key's id names, kept so the id cannot be reused; the view)
        self._views: dict[Hashable, tuple[Mapping[str, str], V]] = {}

    def get(self, generation: object, grants: Mapping[str, str], key: Hashable) -> V | None:
        """The view remembered for ``generation``, the grant map ``grants`` (by identity) and the
        rest of its inputs ``key``; ``None`` when none is."""
        if generation is not self._generation:
            return None
        hit = self._views.get((id(grants), key))
        return hit[1] if hit is not None and hit[0] is grants else None

    def put(self, generation: object, grants: Mapping[str, str], key: Hashable, view: V) -> None:
        """Remember ``view`` (a view of another generation than the remembered one drops those)."""
        if generation is not self._generation:
            self._generation = generation
            self._views = {}
        self._views[(id(grants), key)] = (grants, view)
        if len(self._views) > VIEWS:
            del self._views[next(iter(self._views))]
