"""``mcp-reconciler serve`` with a probe on its event loop, for tests and benchmarks that bound
how long the gateway itself holds the loop (ADR 0040).

    python -m tests.support.loop_probe --config gw.yaml --port-file PATH --stats-file PATH

It runs exactly what ``serve`` runs (``api.server.run_serve``, the imports' heap frozen first, as
``api/cli.py`` does) with one more task on the same loop: a 5 ms ticker recording how late each
wake-up is and how much CPU this thread spent between two wake-ups — the longest such stretch is
the loop held by the gateway itself, whatever else the machine runs. On ``SIGUSR1`` it writes the
figures since the last report to ``--stats-file`` (atomically: ``late_max_ms``, ``late_p99_ms``,
``own_max_ms``, ``ticks``) and starts over. SIGINT/SIGTERM stop it as they stop ``serve``."""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import anyio.lowlevel

from mcp_reconciler.api.server import run_serve

T = TypeVar("T")


async def own_cpu_between_turns(work: Callable[[], Awaitable[T]]) -> tuple[T, list[float], float]:
    """Run ``work`` beside a task that takes every turn of the loop it gets: ``work``'s result,
    this thread's CPU (seconds) between two of those turns, and the CPU ``work`` spent. In
    process, for a unit test of code that must give the loop turns (ADR 0040).

    The heap is frozen while ``work`` runs, as ``serve`` freezes its imports' heap: late in a
    full test run a gen-2 collection over everything earlier tests left alive took 300 ms inside
    one slice (seen in CI), which measures the test process, not the code under test."""
    own: list[float] = []
    done = anyio.Event()
    frozen_before = gc.get_freeze_count()  # the test run's own freeze (tests/conftest.py) stays
    gc.collect()
    gc.freeze()
    try:
        return await _own_cpu_between_turns(work, own, done)
    finally:
        if not frozen_before:
            gc.unfreeze()


async def _own_cpu_between_turns(
    work: Callable[[], Awaitable[T]], own: list[float], done: anyio.Event
) -> tuple[T, list[float], float]:

    async def ticker() -> None:
        last = time.thread_time()
        while not done.is_set():
            await anyio.lowlevel.checkpoint()
            now = time.thread_time()
            own.append(now - last)
            last = now

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        started = time.thread_time()
        result = await work()
        spent = time.thread_time() - started
        done.set()
    return result, own, spent


class LoopStats:
    """A 5 ms ticker's lateness and this thread's CPU between two ticks, since the last report."""

    def __init__(self) -> None:
        self.late: list[float] = []
        self.own: list[float] = []

    async def run(self) -> None:
        while True:
            due, cpu0 = time.perf_counter() + 0.005, time.thread_time()
            await anyio.sleep(0.005)  # the probe's period: how late the loop wakes it is the measure
            self.late.append(max(0.0, time.perf_counter() - due) * 1000)
            self.own.append((time.thread_time() - cpu0) * 1000)

    def report(self, path: str) -> None:
        late = sorted(self.late) or [0.0]
        figures = {
            "late_max_ms": late[-1],
            "late_p99_ms": late[int(0.99 * (len(late) - 1))],
            "own_max_ms": max(self.own or [0.0]),
            "ticks": len(self.own),
        }
        self.late, self.own = [], []
        with open(path + ".tmp", "w", encoding="ascii") as f:
            json.dump(figures, f)
        os.replace(path + ".tmp", path)  # the reader never sees half a report


async def amain(config: str, port_file: str, stats_file: str) -> int:
    stats = LoopStats()
    with anyio.open_signal_receiver(signal.SIGUSR1) as reports:
        async with anyio.create_task_group() as tg:

            async def on_reports() -> None:
                async for _ in reports:
                    stats.report(stats_file)  # a few bytes, on the loop: the probe's own cost

            tg.start_soon(stats.run)
            tg.start_soon(on_reports)
            code = await run_serve(config, "127.0.0.1", 0, port_file=port_file)
            tg.cancel_scope.cancel()
    return code


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--stats-file", required=True)
    args = p.parse_args()
    gc.collect()
    gc.freeze()  # as ``mcp-reconciler serve`` does (api/cli.py)
    return anyio.run(amain, args.config, args.port_file, args.stats_file)


if __name__ == "__main__":
    sys.exit(main())
