"""Token buckets, taken all or none (issue 30, ADR 0033).

A bucket holds at most ``burst`` tokens and refills at ``rate`` tokens per second; a call takes
one token from *every* bucket that applies to it, or from none of them. "None" matters: a call
refused by its session's bucket must not spend a token of the total bucket, or one client that is
over its own limit would drain everyone's.

A bucket is ``(tokens, stamp)``. One that has refilled to ``burst`` is the same as one that does
not exist, so a table may drop full buckets at any time (:meth:`BucketTable.prune`): that is what
keeps the table bounded by the callers that were active within one refill period, not by every
caller ever seen. The Redis store runs the same arithmetic in one Lua script
(``reconciler/cluster/redis_store.py``); this module is the one in-process implementation."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: Prune full buckets when a table grows past this many (amortised: at most once per growth).
PRUNE_AT = 4096


@dataclass(frozen=True, slots=True)
class BucketSpec:
    """One bucket a call takes from: its ``key`` (rule and scope value), ``rate`` (tokens per
    second, > 0) and ``burst`` (capacity, ≥ 1)."""

    key: str
    rate: float
    burst: float


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a take failed: the index of the binding bucket in the specs given (the one that needs
    the longest wait) and ``retry_after_s``, when one token will be there for every bucket."""

    index: int
    retry_after_s: float


class BucketTable:
    """Buckets in this process's memory. ``take`` never awaits, so on one event loop it is
    atomic across all the buckets it touches."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, tuple[float, float, float]] = {}
        self._prune_at = PRUNE_AT

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, specs: Sequence[BucketSpec]) -> Refusal | None:
        """Take one token from every bucket in ``specs``, or from none: ``None`` when taken,
        else the :class:`Refusal` of the bucket that refuses longest."""
        now = self._clock()
        buckets = self._buckets
        levels: list[float] = []
        refusal: Refusal | None = None
        for i, spec in enumerate(specs):
            held = buckets.get(spec.key)
            level = spec.burst if held is None else min(spec.burst, held[0] + (now - held[1]) * spec.rate)
            if level < 1.0:
                wait = (1.0 - level) / spec.rate
                if refusal is None or wait > refusal.retry_after_s:
                    refusal = Refusal(i, wait)
            levels.append(level)
        if refusal is not None:
            return refusal
        for spec, level in zip(specs, levels, strict=True):
            left = level - 1.0
            # The third field: when this bucket is full again, so pruning needs no spec.
            buckets[spec.key] = (left, now, now + (spec.burst - left) / spec.rate)
        if len(buckets) > self._prune_at:
            self.prune()
        return None

    def prune(self) -> int:
        """Drop the buckets that have refilled (the same as absent); returns how many."""
        now = self._clock()
        full = [key for key, (_, _, full_at) in self._buckets.items() if full_at <= now]
        for key in full:
            del self._buckets[key]
        # Grow the threshold while most buckets are live, so pruning stays amortised O(1) a take.
        self._prune_at = max(PRUNE_AT, 2 * len(self._buckets))
        return len(full)

    def clear(self) -> None:
        """Forget every bucket (all full again)."""
        self._buckets.clear()
