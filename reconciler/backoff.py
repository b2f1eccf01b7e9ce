"""The one exponential-backoff formula, shared by the cycle retry (``workqueue.py``), the
per-source reconnect throttle (``throttle.py``) and the SDK's idempotent-request retries.

Dependency-free on purpose (standard library only, nothing from this package), so the SDK can
use it without pulling in the engine's runtime dependencies. Each caller keeps its own policy:
which attempt it is on, its base and cap, how much jitter, and any floor it applies."""

from __future__ import annotations

_MAX_EXPONENT = 30  # 2**30 * any sane base is far past any cap; bounds the float arithmetic


def exponential_delay(attempt: int, *, base_s: float, cap_s: float, spread: float = 0.0, rand: float = 1.0) -> float:
    """The delay before retry number ``attempt`` (1-based).

    The ceiling is ``min(cap_s, base_s * 2**(attempt-1))``; the result is
    ``ceiling * (1 - spread + spread * rand)``. With ``rand`` in [0, 1], ``spread=0`` gives the
    ceiling itself, ``spread=0.5`` "equal jitter" (between half the ceiling and the ceiling) and
    ``spread=1`` "full jitter" (between 0 and the ceiling). Never negative for non-negative
    inputs; ``attempt < 1`` counts as 1."""
    exponent = min(max(attempt, 1) - 1, _MAX_EXPONENT)
    ceiling = min(cap_s, base_s * float(2**exponent))
    return ceiling * (1.0 - spread + spread * rand)
