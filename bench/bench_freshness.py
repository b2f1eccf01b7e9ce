"""Stat-sweep cost of a freshness check (docs/DESIGN.md "Freshness": checking must be cheap).

Prints median and p99 wall time of ``take_fingerprint`` for 10, 100 and 1,000 tracked files,
tracked two ways: as explicit paths, and as matches of one recursive glob (which adds the
directory walk). Files live in a fresh temp dir; the page cache is warm after the first sweep,
which is the steady state of a watcher. Target: <= 10 ms for 1,000 files.

Run: ``python bench/bench_freshness.py``. A benchmark, not a timed test: it prints figures.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp_reconciler.reconciler.freshness import take_fingerprint

SIZES = (10, 100, 1000)
RUNS = 300
WARMUP = 10


def _populate(root: Path, n: int) -> list[Path]:
    # Spread over subdirectories like a real data tree (and so the glob walks directories).
    paths = []
    for i in range(n):
        path = root / f"d{i % 10}" / f"f{i:05d}.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"value: {i}\n")
        paths.append(path)
    return paths


def _measure(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    for _ in range(WARMUP):
        fn()
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - start) / 1e6)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def main() -> None:
    print(f"take_fingerprint stat sweep, {RUNS} runs each (ms)")
    print(f"{'files':>6}  {'mode':<14} {'median':>8} {'p99':>8}")
    for n in SIZES:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            paths = _populate(root, n)
            pattern = str(root / "**" / "*.yml")
            fp = take_fingerprint((), [pattern])
            assert len(fp.files) == n, (len(fp.files), n)
            for mode, fn in (
                ("paths", lambda paths=paths: take_fingerprint(paths, ())),
                ("recursive glob", lambda pattern=pattern: take_fingerprint((), [pattern])),
            ):
                median, p99 = _measure(fn, RUNS)
                print(f"{n:>6}  {mode:<14} {median:>8.3f} {p99:>8.3f}")


if __name__ == "__main__":
    main()
