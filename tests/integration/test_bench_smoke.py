"""The data-plane benchmarks run end to end at tiny sizes, so they cannot rot (issue 26).

Each bench is run as ``make`` would run it, with ``--smoke``: every server it starts, every row and
every goal line it prints must be there. Nothing here judges a figure — benchmarks never assert
timings (docs/DESIGN.md "Layout") — only that each measurement still happens."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.readme import REPO_ROOT

pytestmark = pytest.mark.slow

TIMEOUT_S = 540


def run_bench(*argv: str) -> str:
    done = subprocess.run(
        [sys.executable, *argv, "--smoke"],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done.stdout


def test_bench_dataplane_measures_every_row_and_goal_in_both_eras() -> None:
    out = run_bench("bench/bench_dataplane.py")
    for era in ("[legacy]", "[2026-07-28]"):
        assert era in out
    for row in ("direct", "byte relay", "gateway"):
        assert out.count(f"\n  {row:22} ") == 2, row  # one table row per era
    for goal in (
        "gateway CPU / byte relay CPU",
        "gateway CPU / upstream SDK CPU",
        "byte relay CPU / upstream SDK CPU",
        "gateway added p50 ms",
        "gateway tput@4 / direct",
    ):
        assert out.count(goal) == 2, goal


def test_bench_upstream_call_measures_the_upstream_side_in_both_eras() -> None:
    out = run_bench("bench/bench_upstream_call.py")
    for era in ("2025", "2026"):
        assert re.search(rf"\n  {era} +\d+\.\d+ +\d+\.\d+\n", out), era  # CPU and wall per call


def test_bench_plane_goals_measures_lists_fanout_and_idle_sessions() -> None:
    out = run_bench("bench/bench_plane_goals.py")
    assert "[list gateway]" in out
    for phase in ("2025 first list per session", "2025 second pass", "2026 sessionless"):
        assert phase in out
    for era in ("2025", "2026"):
        assert f"[fanout gateway] {era} era" in out
    assert "after the round's first arrival" in out
    assert "[idle gateway]" in out
    reaped = re.search(r"reaped (\d+)/(\d+) probed", out)
    assert reaped is not None and int(reaped[1]) > 0, "no idle session was reaped"
