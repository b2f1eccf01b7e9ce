"""The one backoff formula reproduces, bit for bit, the three schedules it replaced: the cycle
retry (equal jitter), the reconnect throttle (full jitter with a floor) and the SDK's retries."""

from __future__ import annotations

import math

import pytest

from mcp_reconciler.reconciler.backoff import exponential_delay
from mcp_reconciler.reconciler.throttle import Backoff
from mcp_reconciler.sdk.client import RETRY_BASE_S

JITTERS = (0.0, 0.25, 0.5, 0.999, 1.0)


@pytest.mark.parametrize("jitter", JITTERS)
def test_cycle_retry_schedule_is_unchanged(jitter: float) -> None:
    cooldown, cap = 1.0, 30.0
    for failures in range(1, 45):
        old = min(cap, cooldown * (2 ** min(failures, 30))) * (0.5 + 0.5 * jitter)
        new = exponential_delay(failures + 1, base_s=cooldown, cap_s=cap, spread=0.5, rand=jitter)
        assert new == old, failures


@pytest.mark.parametrize("rand", JITTERS)
def test_reconnect_throttle_schedule_is_unchanged(rand: float) -> None:
    base, cap, cooldown = 0.5, 30.0, 1.0
    for failures in range(1, 45):
        old = max(cooldown, rand * min(cap, base * float(2 ** min(failures - 1, 30))))
        new = max(cooldown, exponential_delay(failures, base_s=base, cap_s=cap, spread=1.0, rand=rand))
        assert new == old, failures


def test_sdk_retry_schedule_is_unchanged() -> None:
    for attempt in range(1, 20):
        assert exponential_delay(attempt, base_s=RETRY_BASE_S, cap_s=math.inf) == 0.2 * 2**attempt


def test_the_throttle_follows_it() -> None:
    """(The cycle retry's use is pinned by tests/unit/test_workqueue.py's exact schedule.)"""
    now = [0.0]
    b = Backoff(base_s=0.5, cap_s=30.0, cooldown_s=0.0, clock=lambda: now[0], rand=lambda: 0.5)
    assert b.failure("s") == exponential_delay(1, base_s=0.5, cap_s=30.0, spread=1.0, rand=0.5)
    assert b.failure("s") == exponential_delay(2, base_s=0.5, cap_s=30.0, spread=1.0, rand=0.5)
    assert b.wait_s("s") == pytest.approx(0.5)


def test_edges() -> None:
    assert exponential_delay(0, base_s=1.0, cap_s=10.0) == 1.0  # attempt < 1 counts as 1
    assert exponential_delay(10_000, base_s=1.0, cap_s=10.0) == 10.0  # capped, no overflow
    assert exponential_delay(3, base_s=1.0, cap_s=10.0, spread=1.0, rand=0.0) == 0.0
