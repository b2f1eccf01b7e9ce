"""Reconnect throttling (I8) with a controllable clock."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_reconciler.reconciler.throttle import Backoff


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_I8_attempts_are_spaced_by_cooldown() -> None:
    clock = Clock()
    b = Backoff(cooldown_s=1.0, clock=clock, rand=lambda: 0.0)
    assert b.wait_s("s") == 0.0
    b.attempt("s")
    assert b.wait_s("s") == 1.0
    clock.now = 1.0
    assert b.wait_s("s") == 0.0


def test_I8_failures_back_off_exponentially_to_the_cap() -> None:
    clock = Clock()
    b = Backoff(base_s=0.5, cap_s=30.0, cooldown_s=0.0, clock=clock, rand=lambda: 1.0)
    delays = []
    for _ in range(10):
        b.attempt("s")
        delays.append(b.failure("s"))
        clock.now += delays[-1]
    assert delays[:7] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    assert max(delays) == 30.0


def test_I8_healthy_period_resets_and_short_life_counts_as_failure() -> None:
    clock = Clock()
    b = Backoff(base_s=0.5, cap_s=30.0, cooldown_s=0.0, healthy_s=60.0, clock=clock, rand=lambda: 1.0)
    b.failure("s")
    b.failure("s")
    b.ended("s", lived_s=5.0)  # died young: one more failure
    assert b.failures("s") == 3
    b.ended("s", lived_s=61.0)
    assert b.failures("s") == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=200))
def test_I8_dying_loop_costs_bounded_attempts(jitters: list[float]) -> None:
    """Whatever the jitter, an upstream that dies instantly gets at most one attempt per
    cooldown: over a window of W seconds, attempts <= W / cooldown + 1."""
    clock = Clock()
    it = iter(jitters)
    b = Backoff(base_s=0.5, cap_s=30.0, cooldown_s=1.0, clock=clock, rand=lambda: next(it, 1.0))
    attempts = 0
    while clock.now < 120.0:
        wait = b.wait_s("s")
        if wait > 0:
            clock.now += wait
            continue
        b.attempt("s")
        attempts += 1
        b.failure("s")
    assert attempts <= 120.0 / 1.0 + 1
