"""The data-plane benchmarks run end to end at tiny sizes, so they cannot rot (issue 26).

Each bench is run as ``make`` would run it, with ``--smoke``: every server it starts, every row and
every goal line it prints must be there. Nothing here judges a figure — benchmarks never assert
timings (docs/DESIGN.md "Layout") — only that each measurement still happens."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.readme import REPO_ROOT

pytestmark = pytest.mark.slow

TIMEOUT_S = 540


#: Every smoke run, each as ``make`` would run it with ``--smoke``: the data plane, the upstream
#: side's CPU per call, and the plane goals' three phases one per process (``--only``). They run
#: at once — each has its own servers and temporary directory, and a smoke run is mostly
#: interpreters starting, which overlap (~20 s one after another).
RUNS = {
    "dataplane": ("bench/bench_dataplane.py",),
    "upstream call": ("bench/bench_upstream_call.py",),
    **{f"plane goals {phase}": ("bench/bench_plane_goals.py", "--only", phase) for phase in ("list", "fanout", "idle")},
}


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str

    def ok(self) -> str:
        """Its stdout, once it exited 0."""
        assert self.code == 0, self.out[-3000:] + self.err[-5000:]
        return self.out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every run in :data:`RUNS`, started at once and waited for (bounded)."""
    tmp = tmp_path_factory.mktemp("bench-smoke")
    started: dict[str, tuple[subprocess.Popen[bytes], Path, Path]] = {}
    try:
        for i, (name, argv) in enumerate(RUNS.items()):
            out, err = tmp / f"{i}.out", tmp / f"{i}.err"
            with out.open("wb") as o, err.open("wb") as e:  # files, not pipes: nobody waits on a full pipe
                proc = subprocess.Popen(
                    [sys.executable, *argv, "--smoke"], cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=o, stderr=e
                )
            started[name] = (proc, out, err)
        done: dict[str, Run] = {}
        for name, (proc, out, err) in started.items():
            code = proc.wait(timeout=TIMEOUT_S)
            done[name] = Run(code, out.read_text(errors="replace"), err.read_text(errors="replace"))
        return done
    finally:
        for proc, _out, _err in started.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_bench_dataplane_measures_every_row_and_goal_in_both_eras(runs: dict[str, Run]) -> None:
    out = runs["dataplane"].ok()
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


def test_bench_upstream_call_measures_the_upstream_side_in_both_eras(runs: dict[str, Run]) -> None:
    out = runs["upstream call"].ok()
    for era in ("2025", "2026"):
        assert re.search(rf"\n  {era} +\d+\.\d+ +\d+\.\d+\n", out), era  # CPU and wall per call


def test_bench_plane_goals_measures_lists_fanout_and_idle_sessions(runs: dict[str, Run]) -> None:
    out = "\n".join(run.ok() for name, run in runs.items() if name.startswith("plane goals"))
    assert "[list gateway]" in out
    for phase in ("2025 first list per session", "2025 second pass", "2026 sessionless"):
        assert re.search(rf"\n  {phase} +p50 +\d+\.\d+ ms .* parse p50 +\d+\.\d+ ms", out), phase  # raw client
    for era in ("2025", "2026"):  # the same-run baseline and the older httpx rows
        assert re.search(rf"\n  direct upstream {era} +p50 +\d+\.\d+ ms", out), era
        assert f"{era}: gateway p50 / direct upstream p50 (same run)" in out
    assert "httpx 2025 second pass" in out and "httpx 2026 sessionless" in out
    for era in ("2025", "2026"):
        assert f"[fanout gateway] {era} era" in out
    assert "after the round's first arrival" in out
    assert "[idle gateway]" in out
    reaped = re.search(r"reaped (\d+)/(\d+) probed", out)
    assert reaped is not None and int(reaped[1]) > 0, "no idle session was reaped"
