"""Run every engine benchmark, print a combined table, write bench/results/engine.json.

Run from the repo root:  python bench/run_all.py

Each benchmark runs in its own interpreter (so heap state, tracemalloc and GC history of one
cannot skew the other); its own output is streamed through unchanged, then a summary table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, BENCH_DIR)

from _stats import dump_json, environment, fmt_bytes, verdict  # noqa: E402

BENCHES = ("bench_pins.py", "bench_cycle.py")
OUT_PATH = os.path.join(BENCH_DIR, "results", "engine.json")


def run_one(script: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.json")
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, os.path.join(BENCH_DIR, script), "--json", path],
            cwd=REPO_ROOT,
            check=False,
        )
        wall = time.perf_counter() - t0
        if proc.returncode != 0 or not os.path.exists(path):
            return {"error": f"{script} exited with {proc.returncode}", "wall_s": wall}
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        data["process_wall_s"] = wall
        return data


def main() -> int:
    results: dict[str, dict] = {}
    for script in BENCHES:
        print(f"\n##### {script} #####\n", flush=True)
        results[script.removesuffix(".py").removeprefix("bench_")] = run_one(script)

    rows: list[tuple[str, str, str, str]] = []  # metric, value, target, verdict
    pins = results.get("pins", {})
    if "error" not in pins:
        pr, op = pins["pin_release"], pins["operation"]
        rows += [
            (
                "pin()+release() pairs/s (median round)",
                f"{pr['pairs_per_s']:,.0f}",
                ">= 500,000",
                verdict(pr["pairs_per_s"] >= 500_000),
            ),
            (
                "pin()+release() ns/pair median / p99",
                f"{pr['ns_per_pair_median']:.0f} / {pr['ns_per_pair_p99']:.0f}",
                "< 2,000",
                verdict(pr["ns_per_pair_p99"] < 2_000),
            ),
            ("pin()+release() vs empty fn-call pair", f"{pr['ratio_vs_empty_fn_pair']:.1f}x", "-", "info"),
            (
                "async with operation() ns median / p99",
                f"{op['ns_per_op_median']:.0f} / {op['ns_per_op_p99']:.0f}",
                "-",
                "info",
            ),
            (
                "operation() vs empty async cm / pin+release",
                f"{op['ratio_vs_empty_async_cm']:.1f}x / {op['ratio_vs_pin_release']:.1f}x",
                "-",
                "info",
            ),
        ]
    cyc = results.get("cycle", {})
    if "error" not in cyc:
        one, alld, m, g = cyc["one_dirty_ms"], cyc["all_dirty_ms"], cyc["memory"], cyc["gc"]
        ratio = cyc["ratio_all_over_one"]["median"]
        st = g["steady_one_dirty_ms"]
        rows += [
            (
                "cycle, one dirty ms median / p99",
                f"{one['median']:.2f} / {one['p99']:.2f}",
                "<= 20",
                verdict(one["p99"] <= 20),
            ),
            ("cycle, all dirty ms median / p99", f"{alld['median']:.1f} / {alld['p99']:.1f}", "-", "info"),
            ("cycle ratio all/one (median)", f"{ratio:.1f}x", ">= 10x", verdict(ratio >= 10)),
            (
                "cycle, one dirty steady: max / full GCs",
                f"{st['max']:.1f} ms / {g['steady_full_collections']} in {st['n']}",
                "<= 20 (tail)",
                verdict(st["max"] <= 20) + " (GC)",
            ),
            (
                "extra generation retained (1 source changed)",
                fmt_bytes(m["per_generation_retained_avg_bytes"]),
                "~1 source + routes",
                verdict(m["per_generation_over_whole_catalog"] < 0.10),
            ),
            ("  whole catalog (10,000 entries)", fmt_bytes(m["whole_catalog_entries_bytes"]), "-", "info"),
            ("  extra gen / whole catalog", f"{100 * m['per_generation_over_whole_catalog']:.2f}%", "-", "info"),
        ]
        for k, v in m["reachability_breakdown"].items():
            rows.append((f"  breakdown: {k[:40]}", fmt_bytes(v), "-", "info"))

    print("\n##### combined #####\n")
    w = max(len(r[0]) for r in rows) if rows else 40
    hdr = f"{'metric':<{w}}  {'value':>22}  {'target':>20}  verdict"
    print(hdr)
    print("-" * len(hdr))
    for metric, value, target, v in rows:
        print(f"{metric:<{w}}  {value:>22}  {target:>20}  {v}")
    for name, r in results.items():
        if "error" in r:
            print(f"{name}: ERROR {r['error']}")

    combined = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "env": environment(),
        "summary": [{"metric": a, "value": b, "target": c, "verdict": d} for a, b, c, d in rows],
        "results": results,
    }
    dump_json(OUT_PATH, combined)
    print(f"\nwrote {os.path.relpath(OUT_PATH, REPO_ROOT)}")
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
