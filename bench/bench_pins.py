"""Hot-path pin cost: ``LiveGeneration.pin()`` + ``Pin.release()`` and ``async with live.operation()``.

Run from the repo root:  python bench/bench_pins.py [--json PATH]

Setup: a Runtime entered inside an anyio (asyncio) event loop with one published generation
(one source, 20 tools). Every case runs the same ``for _ in range(N)`` loop; rounds of all cases
are interleaved so that drift (frequency scaling, other processes) hits them equally. Figures
are per-round ns per pair; we print the median and p99 over rounds, pairs/s from the median,
and ratios against baselines measured in the same run:

- ``baseline: empty fn pair``  — two calls of an empty Python function (what pin+release is,
  at minimum: two calls).
- ``baseline: empty async cm`` — ``async with`` a no-op async context manager (the floor for
  ``async with live.operation()``).

Targets (docs/DESIGN.md "Hot path"): pin+release >= 500k pairs/s, < 2 us per pair.
"""

from __future__ import annotations

import gc
import os
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import anyio  # noqa: E402
from _stats import dump_json, environment, json_out_path, summary, verdict  # noqa: E402

from mcp_reconciler.reconciler.bounds import Bounds  # noqa: E402
from mcp_reconciler.reconciler.catalog import make_entry, merge  # noqa: E402
from mcp_reconciler.reconciler.model import EntryKind, SourceSpec, SourceState  # noqa: E402
from mcp_reconciler.reconciler.runtime import LiveState, Runtime  # noqa: E402

SYNC_N = 100_000  # pairs per round (sync cases)
SYNC_ROUNDS = 31
ASYNC_N = 10_000  # operations per round (async cases)
ASYNC_ROUNDS = 21
TARGET_PAIRS_PER_S = 500_000
TARGET_NS_PER_PAIR = 2_000


def _catalog():
    spec = SourceSpec(name="bench")
    entries = tuple(
        make_entry(
            spec,
            EntryKind.TOOL,
            f"tool{j:02d}",
            {
                "name": f"tool{j:02d}",
                "description": f"tool {j} " + "x" * 180,
                "inputSchema": {"type": "object", "properties": {"a": {"type": "string"}}},
            },
        )
        for j in range(20)
    )
    state = SourceState(source=spec.name, spec_digest=spec.digest, entries=entries, built_at=time.time())
    return merge([state], bounds=Bounds(), built_at=time.time())


# -- the measured loops (each returns elapsed ns for n iterations) -----------------------------


def _empty() -> None:
    pass


def loop_overhead(n: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        pass
    return time.perf_counter_ns() - t0


def empty_fn_pair(n: int) -> int:
    f = _empty
    t0 = time.perf_counter_ns()
    for _ in range(n):
        f()
        f()
    return time.perf_counter_ns() - t0


def pin_release(live, n: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        p = live.pin()
        p.release()
    return time.perf_counter_ns() - t0


def pin_with(live, n: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        with live.pin():
            pass
    return time.perf_counter_ns() - t0


def hot_path(runtime, name: str, n: int) -> int:
    """docs/DESIGN.md hot path minus the forward: current generation -> routing lookup -> pin -> release."""
    tool = EntryKind.TOOL
    t0 = time.perf_counter_ns()
    for _ in range(n):
        live = runtime.current
        entry = live.generation.lookup(tool, name)
        p = live.pin()
        _ = entry.upstream_name
        p.release()
    return time.perf_counter_ns() - t0


class _NullACM:
    __slots__ = ()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


async def empty_acm(n: int) -> int:
    cm = _NullACM()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        async with cm:
            pass
    return time.perf_counter_ns() - t0


async def operation(live, n: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        async with live.operation():
            pass
    return time.perf_counter_ns() - t0


async def operation_deadline(live, n: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        async with live.operation(300.0):
            pass
    return time.perf_counter_ns() - t0


# -- driver --------------------------------------------------------------------------------------


async def _measure() -> dict:
    async with Runtime(Bounds()) as runtime:
        result = runtime.publish(_catalog())
        live = runtime.current
        assert result.status == "published" and live is not None and live.state is LiveState.CURRENT
        name = next(iter(live.generation.tools))

        sync_cases = {
            "loop overhead (empty for)": lambda n: loop_overhead(n),
            "baseline: empty fn pair": lambda n: empty_fn_pair(n),
            "pin() + release()": lambda n: pin_release(live, n),
            "with live.pin():": lambda n: pin_with(live, n),
            "hot path: current+lookup+pin+release": lambda n: hot_path(runtime, name, n),
        }
        async_cases = {
            "baseline: empty async cm": lambda n: empty_acm(n),
            "async with live.operation():": lambda n: operation(live, n),
            "async with live.operation(300.0):": lambda n: operation_deadline(live, n),
        }
        # warm-up (specialising interpreter, allocator pools)
        for fn in sync_cases.values():
            fn(SYNC_N // 10)
        for afn in async_cases.values():
            await afn(ASYNC_N // 10)

        sync_samples: dict[str, list[float]] = {k: [] for k in sync_cases}
        for _ in range(SYNC_ROUNDS):
            for k, fn in sync_cases.items():
                sync_samples[k].append(fn(SYNC_N) / SYNC_N)
        async_samples: dict[str, list[float]] = {k: [] for k in async_cases}
        for _ in range(ASYNC_ROUNDS):
            for k, afn in async_cases.items():
                async_samples[k].append(await afn(ASYNC_N) / ASYNC_N)

        pins_left = live.pins
        ops_left = live.operations
    return {
        "sync": sync_samples,
        "async": async_samples,
        "pins_left": pins_left,
        "operations_left": ops_left,
    }


def run() -> dict:
    gc.collect()
    t_start = time.perf_counter()
    raw = anyio.run(_measure)
    wall = time.perf_counter() - t_start

    cases: dict[str, dict] = {}
    for group in ("sync", "async"):
        for k, xs in raw[group].items():
            s = summary(xs)
            s["pairs_per_s"] = 1e9 / s["median"]
            s["group"] = group
            cases[k] = s
    base_sync = cases["baseline: empty fn pair"]["median"]
    base_async = cases["baseline: empty async cm"]["median"]
    loop = cases["loop overhead (empty for)"]["median"]
    for s in cases.values():
        base = base_sync if s["group"] == "sync" else base_async
        s["ratio_vs_baseline"] = s["median"] / base
        s["net_of_loop_ns"] = s["median"] - loop

    pin = cases["pin() + release()"]
    ok_rate = pin["pairs_per_s"] >= TARGET_PAIRS_PER_S
    ok_ns = pin["p99"] < TARGET_NS_PER_PAIR
    out = {
        "bench": "pins",
        "env": environment(),
        "config": {
            "sync_pairs_per_round": SYNC_N,
            "sync_rounds": SYNC_ROUNDS,
            "async_ops_per_round": ASYNC_N,
            "async_rounds": ASYNC_ROUNDS,
            "backend": "asyncio (anyio.run)",
        },
        "cases": cases,
        "pin_release": {
            "ns_per_pair_median": pin["median"],
            "ns_per_pair_p99": pin["p99"],
            "pairs_per_s": pin["pairs_per_s"],
            "ratio_vs_empty_fn_pair": pin["ratio_vs_baseline"],
        },
        "operation": {
            "ns_per_op_median": cases["async with live.operation():"]["median"],
            "ns_per_op_p99": cases["async with live.operation():"]["p99"],
            "ops_per_s": cases["async with live.operation():"]["pairs_per_s"],
            "ratio_vs_empty_async_cm": cases["async with live.operation():"]["ratio_vs_baseline"],
            "ratio_vs_pin_release": cases["async with live.operation():"]["median"] / pin["median"],
        },
        "targets": {
            "pairs_per_s>=500k": {"value": pin["pairs_per_s"], "met": ok_rate},
            "ns_per_pair<2000 (p99 of rounds)": {"value": pin["p99"], "met": ok_ns},
        },
        "leaks": {"pins_left": raw["pins_left"], "operations_left": raw["operations_left"]},
        "wall_s": wall,
    }
    _print(out)
    return out


def _print(out: dict) -> None:
    cfg = out["config"]
    print("== bench_pins: LiveGeneration.pin()/Pin.release() and live.operation() ==")
    env = out["env"]
    print(f"python {env['python']} on {env['machine']}, {env['cpus']} CPUs; backend {cfg['backend']}")
    print(
        f"sync: {cfg['sync_rounds']} rounds x {cfg['sync_pairs_per_round']:,} pairs; "
        f"async: {cfg['async_rounds']} rounds x {cfg['async_ops_per_round']:,} ops; "
        "figures are per-round ns/iteration"
    )
    print()
    hdr = f"{'case':<40} {'median ns':>10} {'p99 ns':>9} {'min ns':>8} {'iter/s (median)':>16} {'x baseline':>11}"
    print(hdr)
    print("-" * len(hdr))
    for k, s in out["cases"].items():
        if k == "baseline: empty async cm":
            print()
        print(
            f"{k:<40} {s['median']:>10.1f} {s['p99']:>9.1f} {s['min']:>8.1f} "
            f"{s['pairs_per_s']:>16,.0f} {s['ratio_vs_baseline']:>10.2f}x"
        )
    print()
    pr = out["pin_release"]
    op = out["operation"]
    print(
        f"pin+release: {pr['pairs_per_s']:,.0f} pairs/s, {pr['ns_per_pair_median']:.0f} ns/pair median, "
        f"{pr['ns_per_pair_p99']:.0f} ns p99 ({pr['ratio_vs_empty_fn_pair']:.2f}x an empty fn-call pair)"
    )
    print(
        f"operation():  {op['ops_per_s']:,.0f} ops/s, {op['ns_per_op_median']:.0f} ns/op median, "
        f"{op['ns_per_op_p99']:.0f} ns p99 ({op['ratio_vs_empty_async_cm']:.2f}x an empty async cm, "
        f"{op['ratio_vs_pin_release']:.1f}x pin+release)"
    )
    for name, t in out["targets"].items():
        v = t["value"]
        shown = f"{v:,.0f}"
        print(f"target {name:<34} {shown:>12}  {verdict(t['met'])}")
    lk = out["leaks"]
    print(f"after run: pins held {lk['pins_left']}, operations running {lk['operations_left']} (expect 0, 0)")
    print(f"wall time {out['wall_s']:.1f} s")


if __name__ == "__main__":
    res = run()
    path = json_out_path(sys.argv[1:])
    if path:
        dump_json(path, res)
