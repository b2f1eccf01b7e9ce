"""Run every benchmark, print one combined table, write bench/results/all.json.

Run from the repo root:  python bench/run_all.py [--quick] [--only NAME[,NAME]] [--verbose] [--out PATH]

Benchmarks (in this order): pins, cycle, freshness, upstream, frontdoor, relay, subscriptions. Each runs in its own
interpreter (so heap state, tracemalloc and GC history of one cannot skew another), with
``--json`` to a temp file where the script supports it (``bench_freshness.py`` prints a table
only: its rows are parsed from its output). ``--quick`` is passed to the scripts that support it
(upstream, frontdoor, relay, subscriptions); the others always run in full. Progress goes to stderr (with
``--verbose``, every script's own output too); stdout gets the header and the combined table.
Every script's complete output is kept in the JSON file (``outputs``).

The box may be shared: for each script the CPU used by processes *outside* the benchmarks
(machine busy time from /proc/stat minus this process's children's CPU) is reported as
``bg`` load in cores, next to the load average. Verdicts are each script's own targets; rows
without a target say ``info``. Benchmarks print figures; they never assert (docs/DESIGN.md "Layout")."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, BENCH_DIR)

from _stats import dump_json, environment, fmt_bytes, verdict  # noqa: E402

# name -> (script, accepts --quick, writes --json)
BENCHES: dict[str, tuple[str, bool, bool]] = {
    "pins": ("bench_pins.py", False, True),
    "cycle": ("bench_cycle.py", False, True),
    "freshness": ("bench_freshness.py", False, False),
    "upstream": ("bench_upstream.py", True, True),
    "frontdoor": ("bench_frontdoor.py", True, True),
    "relay": ("bench_relay.py", True, True),
    "subscriptions": ("bench_subscriptions.py", True, True),
    "search": ("bench_search.py", True, True),
    "limits": ("bench_limits.py", True, True),
}
OUT_PATH = os.path.join(BENCH_DIR, "results", "all.json")
HEARTBEAT_S = 30.0
_CLK = os.sysconf("SC_CLK_TCK")

Row = tuple[str, str, str, str]  # metric, value, target, verdict


# -- machine and load ---------------------------------------------------------------------------


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine since boot (user nice system irq softirq steal)."""
    with open("/proc/stat", encoding="ascii") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)) / _CLK


def children_cpu_s() -> float:
    """CPU seconds of this process's terminated (waited-for) descendants."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def loadavg() -> str:
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


# -- running one script -------------------------------------------------------------------------


def run_one(name: str, quick: bool, verbose: bool, index: int, total: int) -> dict[str, Any]:
    script, takes_quick, writes_json = BENCHES[name]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.json")
        cmd = [sys.executable, os.path.join(BENCH_DIR, script)]
        if writes_json:
            cmd += ["--json", path]
        if quick and takes_quick:
            cmd.append("--quick")
        shown = " ".join([os.path.relpath(cmd[1], REPO_ROOT), *cmd[2:]]).replace(path, "TMP.json")
        print(f"[{index}/{total}] {name}: python {shown}", file=sys.stderr, flush=True)
        lines: list[str] = []
        busy0, kids0, t0 = machine_busy_s(), children_cpu_s(), time.perf_counter()
        proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if verbose:
                    sys.stderr.write(f"  {name}| {line}")
                    sys.stderr.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        while True:
            try:
                proc.wait(timeout=HEARTBEAT_S)
                break
            except subprocess.TimeoutExpired:
                if not verbose:
                    last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
                    print(
                        f"      {name}: {time.perf_counter() - t0:.0f} s ... {last[:90]}", file=sys.stderr, flush=True
                    )
        reader.join()
        wall = time.perf_counter() - t0
        kids = children_cpu_s() - kids0
        bg = max(0.0, (machine_busy_s() - busy0) - kids) / max(wall, 1e-9)
        output = "".join(lines)
        res: dict[str, Any] = {
            "script": script,
            "argv": cmd[1:],
            "returncode": proc.returncode,
            "process_wall_s": wall,
            "process_cpu_s": kids,
            "bg_cores": bg,
            "output": output,
        }
        if proc.returncode != 0:
            res["error"] = f"{script} exited with {proc.returncode}"
        elif writes_json:
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    res["data"] = json.load(f)
            else:
                res["error"] = f"{script} wrote no JSON"
        else:
            res["data"] = PARSERS[name](output)
        state = f"ERROR ({res['error']})" if "error" in res else "done"
        print(
            f"      {name}: {state} in {wall:.1f} s (CPU {kids:.1f} s; background load {bg:.2f} cores)",
            file=sys.stderr,
            flush=True,
        )
        return res


# -- parsing what a script prints (scripts without --json) ----------------------------------------

_FRESH_ROW = re.compile(r"^\s*(\d+)\s+(paths|recursive glob)\s+([\d.]+)\s+([\d.]+)\s*$")


def parse_freshness(output: str) -> dict[str, Any]:
    rows = []
    for line in output.splitlines():
        m = _FRESH_ROW.match(line)
        if m:
            rows.append({"files": int(m[1]), "mode": m[2], "median_ms": float(m[3]), "p99_ms": float(m[4])})
    return {"rows": rows, "parsed_from": "stdout"}


PARSERS: dict[str, Callable[[str], dict[str, Any]]] = {"freshness": parse_freshness}


# -- summary rows, from each script's own figures -------------------------------------------------


def rows_pins(d: dict[str, Any]) -> list[Row]:
    pr, op = d["pin_release"], d["operation"]
    return [
        (
            "pin()+release() pairs/s (median round)",
            f"{pr['pairs_per_s']:,.0f}",
            ">= 500,000",
            verdict(pr["pairs_per_s"] >= 500_000),
        ),
        (
            "pin()+release() ns/pair median / p99",
            f"{pr['ns_per_pair_median']:.0f} / {pr['ns_per_pair_p99']:.0f}",
            "p99 < 2,000",
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
            "pins / operations left after run",
            f"{d['leaks']['pins_left']} / {d['leaks']['operations_left']}",
            "0 / 0",
            verdict(d["leaks"]["pins_left"] == 0 and d["leaks"]["operations_left"] == 0),
        ),
    ]


def rows_cycle(d: dict[str, Any]) -> list[Row]:
    one, alld, m, g = d["one_dirty_ms"], d["all_dirty_ms"], d["memory"], d["gc"]
    ratio = d["ratio_all_over_one"]["median"]
    st = g["steady_one_dirty_ms"]
    rows: list[Row] = [
        (
            "cycle 100x100, one dirty ms median / p99",
            f"{one['median']:.2f} / {one['p99']:.2f}",
            "p99 <= 20",
            verdict(one["p99"] <= 20),
        ),
        ("cycle, all dirty ms median / p99", f"{alld['median']:.1f} / {alld['p99']:.1f}", "-", "info"),
        ("cycle ratio all/one (median)", f"{ratio:.1f}x", ">= 10x", verdict(ratio >= 10)),
        (
            "cycle, one dirty steady: max / full GCs",
            f"{st['max']:.1f} ms / {g['steady_full_collections']} in {st['n']}",
            "max <= 20",
            verdict(st["max"] <= 20) + " (GC)",
        ),
        (
            "extra generation retained (1 source changed)",
            fmt_bytes(m["per_generation_retained_avg_bytes"]),
            "< 10% of catalog",
            verdict(m["per_generation_over_whole_catalog"] < 0.10),
        ),
        ("  whole catalog (10,000 entries)", fmt_bytes(m["whole_catalog_entries_bytes"]), "-", "info"),
        (
            "cycle one dirty, untrusted / trusted (I20, thread CPU)",
            f"{d['projection']['cpu_overhead_median']:.3f}",
            "<= 1.10",
            verdict(d["projection"]["cpu_overhead_median"] <= 1.10),
        ),
        ("  extra gen / whole catalog", f"{100 * m['per_generation_over_whole_catalog']:.2f}%", "-", "info"),
    ]
    return rows


def rows_freshness(d: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for r in d["rows"]:
        if r["files"] != 1000:
            continue
        rows.append(
            (
                f"stat sweep 1,000 files ({r['mode']}) ms median / p99",
                f"{r['median_ms']:.2f} / {r['p99_ms']:.2f}",
                "p99 <= 10",
                verdict(r["p99_ms"] <= 10),
            )
        )
    small = [r for r in d["rows"] if r["files"] != 1000]
    if small:
        rows.append(
            (
                "  10 / 100 files (paths) ms median",
                " / ".join(f"{r['median_ms']:.3f}" for r in small if r["mode"] == "paths"),
                "-",
                "info",
            )
        )
    if not d["rows"]:
        rows.append(("stat sweep", "no rows parsed", "-", "ERROR"))
    return rows


def rows_upstream(d: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for key, run in d.get("freshness", {}).items():
        lat = run["latency_ms"]
        rows.append(
            (
                f"list_changed -> published, {key} ms med / p99",
                f"{lat['median']:.2f} / {lat['p99']:.2f}",
                "median <= 50",
                verdict(lat["median"] <= 50),
            )
        )
    for mode in ("legacy", "auto"):
        ch = d.get(f"churn_{mode}")
        if not ch:
            continue
        growth = ch.get("rss_growth_first_sample_to_end")
        if growth is None and ch.get("rss_series"):
            growth = ch["rss_series"][-1][1] - ch["rss_series"][0][1]
        rows.append(
            (
                f"RSS growth, {ch['cycles']:,} reconnects in process ({mode})",
                fmt_bytes(growth or 0),
                "< 1 MiB (flat)",
                verdict((growth or 0) < 1024 * 1024),
            )
        )
        rows.append(
            (
                f"  open conns / live gens at end ({mode})",
                f"{ch['open_connections_end']} / {ch['live_generations_end']}",
                "-",
                "info",
            )
        )
    sc = d.get("stdio_churn")
    if sc:
        rows.append(
            (
                f"stdio crash+respawn x{sc['cycles']}: children left",
                f"{sc['children_after_close']} ({sc['s_per_cycle'] * 1000:.0f} ms/cycle)",
                "0",
                verdict(sc["children_after_close"] == 0),
            )
        )
    if "runtime_objects_alive_at_exit" in d:
        rt, uc = d["runtime_objects_alive_at_exit"], d["upstream_connection_objects_alive_at_exit"]
        rows.append(
            ("Runtime / UpstreamConnection alive at exit", f"{rt} / {uc}", "0 / 0", verdict(rt == 0 and uc == 0))
        )
    return rows


def rows_frontdoor(d: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    comp, lat = d.get("latency_comparison", {}), d.get("latency", {})
    for era in ("legacy", "auto"):
        c = comp.get(f"{era}/gateway HTTP -> HTTP upstream")
        g, dr = lat.get(f"{era}/gateway HTTP -> HTTP upstream", {}), lat.get(f"{era}/direct HTTP", {})
        if c and g.get("lat_ms") and dr.get("lat_ms"):
            rows.append(
                (
                    f"tools/call {era}: gateway vs direct HTTP ms med",
                    f"{g['lat_ms']['median']:.2f} vs {dr['lat_ms']['median']:.2f} "
                    f"(added {c['added_over_direct']:.2f}x)",
                    "added <= 1.0x direct",
                    verdict(c["met"]),
                )
            )
        s = comp.get(f"{era}/gateway HTTP -> stdio upstream")
        gs, ds = lat.get(f"{era}/gateway HTTP -> stdio upstream", {}), lat.get(f"{era}/direct stdio", {})
        if s and gs.get("lat_ms") and ds.get("lat_ms"):
            rows.append(
                (
                    f"  {era}: gateway->stdio vs direct stdio ms med",
                    f"{gs['lat_ms']['median']:.2f} vs {ds['lat_ms']['median']:.2f}",
                    "-",
                    "info",
                )
            )
    for key, row in d.get("throughput", {}).items():
        era, n = key.split("/")
        if n == "32" and "throughput_ratio" in row:
            rows.append(
                (
                    f"  throughput {era}, 32 sessions: gateway/direct",
                    f"{row['gateway']['calls_per_s']:.0f}/s vs {row['direct']['calls_per_s']:.0f}/s "
                    f"({row['throughput_ratio']:.2f}x)",
                    "-",
                    "info",
                )
            )
    hp = d.get("hot_path", {})
    comb = hp.get("components", {}).get("combined")
    if comb:
        worst = max(comb["pct"].values()) if comb["pct"] else math.nan
        rows.append(
            (
                "pin + authority + routing per call",
                f"{comb['us']:.2f} us ({worst:.3f}% of a call)",
                "<= 2% of a call",
                verdict(all(hp.get("met", {}).values())),
            )
        )
    for era, c in d.get("confirm", {}).items():
        if isinstance(c, dict) and "added_over_direct" in c:
            rows.append((f"  confirmation run {era}: added/direct", f"{c['added_over_direct']:.2f}x", "-", "info"))
    ls = d.get("list_scale")
    if ls and "rows" in ls:
        n = ls["open"]["sessions_open"]
        tools = ls["catalog"]["tools"]
        labels = {
            "one_session": "1 session open",
            "first_listing": f"{n:,} open, 1st call/session",
            "repeat_listing": f"{n:,} open, repeat call",
        }
        for key, label in labels.items():
            r = ls["rows"][key]
            s = r["listing_ms"] if r["pages_per_listing"] > 1 else r["request_ms"]
            rows.append(
                (
                    f"tools/list {tools:,} tools, {label} ms med / p99",
                    f"{s['median']:.1f} / {s['p99']:.1f}",
                    "-",
                    "info",
                )
            )
        o = ls["open"]
        rows.append(
            (
                f"  {n:,} sessions: open ms each / gateway RSS each",
                f"{o['ms_per_session']:.1f} / {fmt_bytes(o['gateway_rss_per_session'])}",
                "-",
                "info",
            )
        )
        rep = ls["rows"]["repeat_listing"]
        clean = rep.get("request_ms_without_full_gc")
        if clean:
            rows.append(
                (
                    "  repeat: p99 of calls no full GC overlapped",
                    f"{clean['p99']:.1f} ({rep['requests_during_full_gc']} of {rep['requests']} overlapped)",
                    "-",
                    "info",
                )
            )
        gc_ms = rep.get("gateway_gen2_gc_ms", [])
        rows.append(
            (
                "  repeat: gateway CPU per call / full GC max",
                f"{rep['gw_cpu_ms_per_listing']:.1f} ms / {max(gc_ms, default=0):.0f} ms",
                "-",
                "info",
            )
        )
    if "max_bg_cores" in d:
        rows.append(("  frontdoor: max bg load in a measured block", f"{d['max_bg_cores']:.2f} cores", "-", "info"))
    return rows


def rows_relay(d: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for era in d.get("eras", []):
        rows.append(
            (
                f"relay: sampling round trip added over direct ({era['era']} client)",
                f"{era['relay_added_ms']:.2f} ms (direct trip {era['round_trip_direct_ms']:.2f} ms)",
                "<= 2 ms",
                verdict(era["relay_added_ms"] <= 2.0),
            )
        )
    return rows


def rows_subscriptions(d: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for r in d["results"]:
        a = r["all_ms"]
        rows.append(
            (
                f"resource update -> all {r['sessions']} sessions ({r['downstream']} down, {r['upstream']} up)",
                f"p50 {a['p50']:.1f} ms, p99 {a['p99']:.1f} ms, max {a['max']:.1f} ms",
                f"<= {d['target_ms']:.0f} ms",
                verdict(a["p50"] <= d["target_ms"]),
            )
        )
    return rows


def rows_search(d: dict[str, Any]) -> list[Row]:
    b, q, s = d["build_ms"], d["query_ms"], d["sessions"]
    mib = d["index_bytes_tracemalloc"] / 1048576
    return [
        (
            "search index build, 10,000 tools",
            f"median {b['median']:.0f} ms, max {b['max']:.0f} ms",
            "<= 300 ms",
            verdict(b["max"] <= 300),
        ),
        ("find_tools search", f"p50 {q['p50']:.2f} ms, p99 {q['p99']:.2f} ms", "p99 <= 5 ms", verdict(q["p99"] <= 5)),
        (
            "search index memory",
            f"{mib:.1f} MiB",
            "<= 30 MB",
            verdict(d["index_bytes_tracemalloc"] <= 30 * 1024 * 1024),
        ),
        (
            f"{s['n']} search sessions",
            f"{s['index_module_bytes_per_session']:.1f} B/session of index",
            "no per-session index",
            verdict(s["shared_index"] and s["index_module_bytes_per_session"] < 64),
        ),
    ]


def rows_limits(d: dict[str, Any]) -> list[Row]:
    p = d["in_process"]
    return [
        (
            "rate-limited call, limiter path (memory)",
            f"{p['unlimited_cpu_us']:.1f} -> {p['limited_memory_cpu_us']:.1f} us CPU (+{p['added_memory_cpu_us']:.1f})",
            "<= +20 us",
            verdict(p["added_memory_cpu_us"] <= 20),
        ),
        (
            "rate-limited call, Redis round trip",
            f"p50 {p['redis_admit_us_p50']:.0f} us, p99 {p['redis_admit_us_p99']:.0f} us",
            "stated",
            "-",
        ),
    ]


ROWS: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
    "pins": rows_pins,
    "cycle": rows_cycle,
    "freshness": rows_freshness,
    "upstream": rows_upstream,
    "frontdoor": rows_frontdoor,
    "relay": rows_relay,
    "subscriptions": rows_subscriptions,
    "search": rows_search,
    "limits": rows_limits,
}


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Run every benchmark and print one combined table.")
    p.add_argument("--quick", action="store_true", help="pass --quick to the scripts that support it")
    p.add_argument("--only", help=f"comma-separated subset of: {','.join(BENCHES)}")
    p.add_argument("--verbose", "-v", action="store_true", help="stream every script's output to stderr")
    p.add_argument("--out", default=OUT_PATH, help="combined JSON (default: bench/results/all.json)")
    args = p.parse_args(argv)
    names = list(BENCHES)
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in BENCHES]
        if unknown or not wanted:
            p.error(f"--only: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(BENCHES)}")
        names = [n for n in BENCHES if n in wanted]
    args.names = names
    return args


def _shown(path: str) -> str:
    rel = os.path.relpath(path, REPO_ROOT)
    return path if rel.startswith("..") else rel


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    env = environment()
    load_start = loadavg()
    t_all = time.perf_counter()
    print(
        f"running {', '.join(args.names)}{' (--quick)' if args.quick else ''}; full outputs go to "
        f"{_shown(args.out)} (use --verbose to see them live)",
        file=sys.stderr,
        flush=True,
    )
    results: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(args.names, 1):
        results[name] = run_one(name, args.quick, args.verbose, i, len(args.names))
    total_s = time.perf_counter() - t_all
    load_end = loadavg()

    rows: list[tuple[str, Row]] = []
    for name, res in results.items():
        if "error" in res:
            rows.append((name, ("script failed", res["error"], "-", "ERROR")))
            continue
        try:
            rows += [(name, r) for r in ROWS[name](res["data"])]
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            rows.append((name, ("summary", f"unexpected JSON shape: {type(exc).__name__}: {exc}"[:60], "-", "ERROR")))

    # -- header: the machine and its load
    print(f"mcp-reconciler benchmarks, {time.strftime('%Y-%m-%d %H:%M:%S %z')}{' (--quick)' if args.quick else ''}")
    print(
        f"machine: {os.uname().machine}, {os.cpu_count()} CPUs, Python {env['python']} "
        f"({env['implementation']}), {platform.platform()}"
    )
    print(f"load average (1/5/15 min): {load_start} at start, {load_end} at end")
    print(
        "background load (CPU of processes outside the benchmarks, cores, average per script): "
        + ", ".join(f"{n} {r['bg_cores']:.2f}" for n, r in results.items())
    )
    print(
        "wall time per script: "
        + ", ".join(f"{n} {r['process_wall_s']:.0f} s" for n, r in results.items())
        + f"; total {total_s:.0f} s"
    )
    print()
    wb = max((len(n) for n, _ in rows), default=5)
    wm = max((len(r[0]) for _, r in rows), default=40)
    wv = max((len(r[1]) for _, r in rows), default=10)
    wt = max((len(r[2]) for _, r in rows), default=10)
    hdr = f"{'bench':<{wb}}  {'metric':<{wm}}  {'value':>{wv}}  {'target':<{wt}}  verdict"
    print(hdr)
    print("-" * len(hdr))
    last = ""
    for name, (metric, value, target, v) in rows:
        shown = name if name != last else ""
        last = name
        print(f"{shown:<{wb}}  {metric:<{wm}}  {value:>{wv}}  {target:<{wt}}  {v}")
    verdicts = [r[3].split()[0] for _, r in rows]
    print(
        f"\n{verdicts.count('MET')} MET, {verdicts.count('MISSED')} MISSED, {verdicts.count('info')} info, "
        f"{verdicts.count('ERROR')} ERROR"
    )
    for name, res in results.items():
        if "error" in res:
            tail = "".join(res["output"].splitlines(keepends=True)[-15:])
            print(f"\n{name}: {res['error']}; last lines of its output:\n{tail}")

    combined = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": sys.argv[1:] if argv is None else argv,
        "quick": args.quick,
        "env": {**env, "uname_m": os.uname().machine},
        "load": {
            "loadavg_start": load_start,
            "loadavg_end": load_end,
            "bg_cores": {n: r["bg_cores"] for n, r in results.items()},
        },
        "total_s": total_s,
        "summary": [{"bench": n, "metric": a, "value": b, "target": c, "verdict": d} for n, (a, b, c, d) in rows],
        "results": {n: {k: v for k, v in r.items() if k not in ("output",)} for n, r in results.items()},
        "outputs": {n: r["output"] for n, r in results.items()},
    }
    dump_json(args.out, json.loads(json.dumps(combined, default=str)))
    print(f"\nwrote {_shown(args.out)}")
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
