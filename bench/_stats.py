"""Small helpers shared by the benchmark scripts (statistics, formatting, JSON output).

Benchmarks print figures; they never assert (docs/DESIGN.md "Layout": benchmarks are not timed tests)."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
from collections.abc import Sequence
from typing import Any


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def pct(xs: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100). With fewer than 100 samples p99 is the maximum."""
    s = sorted(xs)
    if not s:
        return math.nan
    k = max(0, min(len(s) - 1, math.ceil(q / 100.0 * len(s)) - 1))
    return float(s[k])


def summary(xs: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(xs),
        "median": median(xs),
        "p99": pct(xs, 99),
        "min": float(min(xs)),
        "max": float(max(xs)),
        "mean": float(statistics.fmean(xs)),
    }


def fmt_bytes(n: float) -> str:
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1024
    return f"{sign}{n:.1f} GiB"


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def environment() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }


def json_out_path(argv: Sequence[str]) -> str | None:
    """``--json PATH`` on the command line: where to dump the results dict."""
    if "--json" in argv:
        i = list(argv).index("--json")
        if i + 1 < len(argv):
            return argv[i + 1]
    return None


def dump_json(path: str, data: dict[str, Any]) -> None:
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=False)
        f.write("\n")


def json_if_asked(argv: Sequence[str], data: dict[str, Any]) -> None:
    """Dump ``data`` where ``--json PATH`` on ``argv`` asks for it (nothing without one)."""
    path = json_out_path(argv)
    if path:
        dump_json(path, data)
