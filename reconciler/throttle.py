"""Per-source reconnect throttling (I8).

Every attempt is spaced at least ``cooldown_s`` from the previous one. After a failure — a
connect that failed, or a connection that died before it had been healthy for ``healthy_s`` —
the next attempt waits ``max(cooldown, U(0, min(cap, base * 2**(n-1))))`` ("full jitter"), so a
dead remote costs O(log) attempts to reach the cap and then one attempt per ~cap/2 on average,
never a storm. A connection that stayed up for ``healthy_s`` resets the count."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from mcp_reconciler.reconciler.backoff import exponential_delay


@dataclass(slots=True)
class _KeyState:
    failures: int = 0
    next_allowed: float = float("-inf")
    attempts: int = 0


class Backoff:
    """Per-key reconnect throttle (keys are source names): :meth:`wait_s` says how long until
    the next attempt is allowed; :meth:`attempt`, :meth:`failure` and :meth:`ended` record what
    happened. Not thread-safe; O(1) per call."""

    def __init__(
        self,
        *,
        base_s: float = 0.5,
        cap_s: float = 30.0,
        cooldown_s: float = 1.0,
        healthy_s: float = 60.0,
        clock: Callable[[], float] = anyio.current_time,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.cooldown_s = cooldown_s
        self.healthy_s = healthy_s
        self._clock = clock
        self._rand = rand
        self._keys: dict[str, _KeyState] = {}

    def _state(self, key: str) -> _KeyState:
        st = self._keys.get(key)
        if st is None:
            st = self._keys[key] = _KeyState()
        return st

    def wait_s(self, key: str) -> float:
        """Seconds until an attempt for ``key`` is allowed (0 when allowed now)."""
        st = self._keys.get(key)
        if st is None:
            return 0.0
        return max(0.0, st.next_allowed - self._clock())

    def failures(self, key: str) -> int:
        """Consecutive failures recorded for ``key`` since its last reset (0 if unknown)."""
        st = self._keys.get(key)
        return 0 if st is None else st.failures

    def attempts(self, key: str) -> int:
        """Attempts recorded for ``key`` so far (0 if unknown)."""
        st = self._keys.get(key)
        return 0 if st is None else st.attempts

    def attempt(self, key: str) -> None:
        """Record an attempt starting now."""
        st = self._state(key)
        st.attempts += 1
        st.next_allowed = max(st.next_allowed, self._clock() + self.cooldown_s)

    def failure(self, key: str) -> float:
        """Record a failed attempt (or a short-lived connection); returns the delay imposed."""
        st = self._state(key)
        st.failures += 1
        jittered = exponential_delay(st.failures, base_s=self.base_s, cap_s=self.cap_s, spread=1.0, rand=self._rand())
        delay = max(self.cooldown_s, jittered)
        st.next_allowed = max(st.next_allowed, self._clock() + delay)
        return delay

    def ended(self, key: str, lived_s: float) -> None:
        """A connection ended after ``lived_s`` seconds: healthy long enough resets, else a failure."""
        if lived_s >= self.healthy_s:
            self.reset(key)
        else:
            self.failure(key)

    def reset(self, key: str) -> None:
        """Forget ``key``'s failures: the next failure starts the backoff from ``base_s`` again. An
        attempt already scheduled keeps its earliest allowed time."""
        st = self._state(key)
        st.failures = 0
