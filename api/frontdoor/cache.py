"""A bounded least-recently-used map, for the front door's parsed definitions.

Listing a view re-uses the parsed SDK model of every definition it has seen (the models are
immutable; the catalog entry's digest is part of the key, so a changed definition is a new
key). The map is bounded because the set of keys grows with every publication that changes a
definition; evicting the least recently used keeps what current listings touch."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """A map holding at most ``capacity`` entries. :meth:`get` of a present key and :meth:`put`
    make that key the most recently used; a :meth:`put` beyond ``capacity`` evicts the least
    recently used entry. Not thread-safe (the front door runs on one event loop)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The value under ``key`` (now the most recently used), or ``None``."""
        try:
            self._data.move_to_end(key)  # one C call for both the hit test and the recency update
        except KeyError:
            return None
        return self._data[key]

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key`` as the most recently used, evicting the least recently
        used entry if the map would exceed its capacity."""
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is cached (does not change its recency)."""
        return key in self._data

    def __len__(self) -> int:
        """The number of entries, never more than ``capacity``."""
        return len(self._data)
