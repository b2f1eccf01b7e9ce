"""What the gateway's data plane costs per forwarded call, against its floor and its upstream (issue 26).

Run from the repo root:  python bench/bench_dataplane.py [--quick | --smoke] [--loops=asyncio,uvloop]
[--profile=ERA] [--json PATH]
(make bench-dataplane)

Set-up, all on 127.0.0.1, every server on a port the kernel picked (reported, never chosen first):
an SDK server (``tests.support.upstream_server``, the ``echo`` tool) over streamable HTTP; a byte
relay in front of it on the same stack as the gateway (``bench/byte_relay.py``: raw ASGI on
uvicorn + httptools, a keep-alive connection upstream, bytes and MCP headers through, no MCP
understanding) and on the same event loop (asyncio, as ``serve``; uvicorn alone would pick uvloop
whenever it is installed); and the gateway (``mcp-reconciler serve``) with that server as its
only source. ``--loops=asyncio,uvloop`` adds a relay and a gateway on uvloop
(``bench/serve_uvloop.py``) as rows of the same run (ADR 0041); ``--profile=ERA`` samples the
gateway with py-spy instead of printing the tables.
SDK ``Client`` instances in this process call ``echo`` three ways — direct, through the relay,
through the gateway — for both eras (``legacy`` = 2025-11-25 sessions, ``auto`` = 2026-07-28),
in interleaved blocks so each row sees the same background load.

Per call it prints: p50/p99 latency, added p50 over direct, the CPU of the process in the middle
(relay or gateway: its own utime+stime from ``/proc/<pid>/stat`` over its rows only), and the
upstream SDK server's own CPU per call (over the direct rows). Then the ratios issue 26 sets goals
for: gateway CPU / relay CPU (goal <= 1.3), gateway CPU / upstream CPU (goal <= 0.5), added p50
(goal <= 0.5 ms) and throughput at 32 sessions against direct (goal >= 0.9). The box is shared:
compare ratios within one run, not absolute figures across runs. Benchmarks print; they never
assert (docs/DESIGN.md "Layout")."""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import anyio  # noqa: E402
import anyio.abc  # noqa: E402
from _clients import cpu_s, loadavg, open_client, run_calls, stop  # noqa: E402
from _ports import port_args, reported_port  # noqa: E402
from _stats import dump_json, json_out_path, pct  # noqa: E402
from mcp import Client  # noqa: E402

from tests.support.waits import until  # noqa: E402

QUICK = "--quick" in sys.argv
SMOKE = "--smoke" in sys.argv  # tiny sizes: the test suite runs it so the bench cannot rot
CALLS, BLOCKS, WARMUP = (12, 2, 2) if SMOKE else (300, 3, 30) if QUICK else (1200, 6, 100)
DURATION_S = 0.3 if SMOKE else 1.0 if QUICK else 3.0
SESSIONS = 4 if SMOKE else 32  # the throughput row's concurrent sessions
#: ``--loops=asyncio,uvloop``: a gateway and a byte relay per event loop, all rows interleaved in
#: one run (ADR 0041). The relay always runs on its gateway's loop: "the same stack".
LOOPS = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--loops=")), "asyncio").split(",")
STARTUP_S = 60.0
#: ``--profile=ERA`` (``legacy`` or ``2026-07-28``): instead of the tables, py-spy samples the
#: gateway for ``PROFILE_S`` seconds while that era calls it (``profile``).
PROFILE = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--profile=")), "")
PROFILE_S = 10 if QUICK else 30


@contextlib.asynccontextmanager
async def child(argv: list[str]) -> AsyncIterator[anyio.abc.Process]:
    """Run ``argv`` from the repo root; terminate, then kill, and reap it on exit."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env["MCP_RECONCILER_OPERATOR_TOKENS"] = "bench-operator"
    proc = await anyio.open_process(
        argv, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=None
    )
    try:
        yield proc
    finally:
        await stop(proc)


# label, url, tool, pid of the process in the middle (None: direct)
Row = tuple[str, str, str, "int | None"]


def _label(kind: str, loop: str) -> str:
    """Row label: plain on the first loop (the rows test_bench_smoke and the README name)."""
    return kind if loop == LOOPS[0] else f"{kind} [{loop}]"


def _ratio(a: float, b: float) -> float:
    """``a / b``, NaN when ``b`` read 0: process CPU is counted in clock ticks (10 ms), which a
    ``--smoke`` run's dozen calls may not reach (seen: a 0.000 upstream reading)."""
    return a / b if b else math.nan


async def bench_era(era: str, rows: list[Row], up_pid: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        clients = {label: await open_client(stack, url, era) for label, url, _, _ in rows}
        for label, _, tool, _ in rows:
            await run_calls([clients[label]], tool, WARMUP, None)
        lat: dict[str, list[float]] = {r[0]: [] for r in rows}
        mid_cpu = {r[0]: 0.0 for r in rows}
        up_cpu = {r[0]: 0.0 for r in rows}
        for b in range(BLOCKS):  # interleaved, rotating order
            for label, _, tool, pid in rows[b % len(rows) :] + rows[: b % len(rows)]:
                m0, u0 = (cpu_s(pid) if pid else 0.0), cpu_s(up_pid)
                xs, _ = await run_calls([clients[label]], tool, CALLS // BLOCKS, None)
                mid_cpu[label] += (cpu_s(pid) - m0) if pid else 0.0
                up_cpu[label] += cpu_s(up_pid) - u0
                lat[label] += xs
        direct = rows[0][0]
        base = pct(lat[direct], 50)
        print(f"\n[{era}] sequential, {CALLS} calls per path, loadavg {loadavg()}")
        print(
            f"  {'path':22} {'p50 ms':>7} {'p99 ms':>7} {'added p50':>9}"
            f" {'own CPU/call ms':>15} {'upstream CPU/call ms':>20}"
        )
        for label, _, _, pid in rows:
            n = len(lat[label])
            p50, p99 = pct(lat[label], 50), pct(lat[label], 99)
            own = mid_cpu[label] * 1000 / n if pid else None
            upc = up_cpu[label] * 1000 / n
            own_txt = f"{own:15.3f}" if own is not None else f"{'-':>15}"
            added = f"{p50 - base:+9.2f}" if pid else f"{'-':>9}"
            print(f"  {label:22} {p50:7.2f} {p99:7.2f} {added} {own_txt} {upc:20.3f}")
            out[label] = {
                "p50_ms": p50,
                "p99_ms": p99,
                "added_p50_ms": p50 - base,
                "own_cpu_ms": own,
                "upstream_cpu_ms": upc,
            }
        many = {
            label: [clients[label]] + [await open_client(stack, url, era) for _ in range(SESSIONS - 1)]
            for label, url, _, _ in rows
        }
        tput: dict[str, float] = {}
        for label, _, tool, _ in rows:
            xs, el = await run_calls(many[label], tool, None, DURATION_S)
            tput[label] = len(xs) / el
            out[label]["calls_per_s_32"] = tput[label]
        up_direct = out[direct]["upstream_cpu_ms"]
        print(f"  throughput at {SESSIONS} sessions, calls/s: " + ", ".join(f"{k} {v:.0f}" for k, v in tput.items()))
        out["ratios"] = {}
        for loop in LOOPS:
            gw_label, relay_label = _label("gateway", loop), _label("byte relay", loop)
            gw, relay = out[gw_label], out[relay_label]
            ratios = {
                "gw_cpu_over_relay": _ratio(gw["own_cpu_ms"], relay["own_cpu_ms"]),
                "gw_cpu_over_upstream": _ratio(gw["own_cpu_ms"], up_direct),
                "relay_cpu_over_upstream": _ratio(relay["own_cpu_ms"], up_direct),
                "gw_added_p50_ms": gw["added_p50_ms"],
                "gw_tput32_over_direct": _ratio(tput[gw_label], tput[direct]),
                "relay_tput32_over_direct": _ratio(tput[relay_label], tput[direct]),
            }
            if loop != LOOPS[0]:  # the same process kind on the first loop, same run
                first_gw = out[_label("gateway", LOOPS[0])]
                ratios["gw_cpu_over_first_loop"] = _ratio(gw["own_cpu_ms"], first_gw["own_cpu_ms"])
                ratios["relay_cpu_over_first_loop"] = _ratio(
                    relay["own_cpu_ms"], out[_label("byte relay", LOOPS[0])]["own_cpu_ms"]
                )
            out["ratios"][loop] = ratios
            if len(LOOPS) > 1:
                print(f"  -- on {loop} (gateway and byte relay both)")
            goals = [
                ("gateway CPU / byte relay CPU", "gw_cpu_over_relay", "<=", 1.3),
                ("gateway CPU / upstream SDK CPU", "gw_cpu_over_upstream", "<=", 0.5),
                ("byte relay CPU / upstream SDK CPU", "relay_cpu_over_upstream", "", 0.0),
                ("gateway added p50 ms", "gw_added_p50_ms", "<=", 0.5),
                (f"gateway tput@{SESSIONS} / direct", "gw_tput32_over_direct", ">=", 0.9),
            ]
            if "gw_cpu_over_first_loop" in ratios:
                goals += [
                    (f"gateway CPU / gateway on {LOOPS[0]}", "gw_cpu_over_first_loop", "", 0.0),
                    (f"byte relay CPU / relay on {LOOPS[0]}", "relay_cpu_over_first_loop", "", 0.0),
                ]
            for text, key, op, target in goals:
                v = ratios[key]
                if not op:
                    print(f"  {text:34} {v:.2f}")
                    continue
                ok = v <= target if op == "<=" else v >= target
                print(f"  {text:34} {v:.2f}  [{'MET' if ok else 'not met'}] (goal {op} {target})")
    return out


async def profile(era: str, row: Row, out: Path) -> None:
    """``--profile=ERA``: py-spy samples the gateway (``row``) while 4 sessions of ``era`` call
    ``h__echo`` back to back; prints the frames with the most own time, the inclusive share of
    the gateway's own frames and of each package. Idle samples (the loop waiting in epoll) are
    left out: the shares are of the busy time."""
    _, url, tool, pid = row
    out = Path(os.environ.get("BENCH_PROFILE_RAW", str(out)))  # keep the raw samples: set a path
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists() or pid is None:
        print("\nprofile: py-spy not installed (pip install py-spy)")
        return
    # --gil: only samples holding the GIL, i.e. Python running (a process preempted inside a
    # socket write on a busy machine would otherwise look like time spent writing)
    argv = [str(spy), "record", "-p", str(pid), "-d", str(PROFILE_S), "-r", "400", "--gil", "-f", "raw", "-o", str(out)]
    async with contextlib.AsyncExitStack() as stack:
        clients = [await open_client(stack, url, era) for _ in range(4)]
        await run_calls(clients, tool, WARMUP, None)
        c0 = cpu_s(pid)
        rec = await anyio.open_process([*argv, "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        xs, _ = await run_calls(clients, tool, None, PROFILE_S + 0.5)
        cpu_ms = (cpu_s(pid) - c0) * 1000 / len(xs)
        await rec.wait()
    own: dict[str, int] = {}
    pkg: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in (await anyio.Path(out).read_text()).splitlines():
        stack_s, _, n_s = line.rpartition(" ")
        frames, n = stack_s.split(";"), int(n_s)
        if "select (" in frames[-1] or "epoll" in frames[-1] or "run_forever" in frames[-1]:
            continue  # idle in the loop's poll
        total += n
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for name in {f.split("(", 1)[-1].split("site-packages/")[-1].split("/")[0] for f in frames}:
            pkg[name] = pkg.get(name, 0) + n
        for f in set(frames):
            if "(api/" in f or "(reconciler/" in f:
                incl[f] = incl.get(f, 0) + n
    total = max(total, 1)
    print(f"\nprofile: gateway, 4 {era} sessions -> {tool}, {len(xs)} calls, {cpu_ms:.3f} ms CPU/call,")
    print(f"  {total} busy samples, loadavg {loadavg()}")
    top = sorted(pkg.items(), key=lambda kv: -kv[1])[:14]
    print("  inclusive share by package/top folder: " + ", ".join(f"{k} {v * 100 // total}%" for k, v in top))
    print("  own time:")
    for frame, n in sorted(own.items(), key=lambda kv: -kv[1])[:40]:
        print(f"  {n * 100 / total:5.1f}%  {frame[:150]}")
    print("  inclusive (the gateway's own frames):")
    for frame, n in sorted(incl.items(), key=lambda kv: -kv[1])[:45]:
        print(f"  {n * 100 / total:5.1f}%  {frame[:150]}")


async def amain() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-dataplane-") as d:
        tmp = Path(d)
        print(f"bench_dataplane: {os.cpu_count()} CPUs, python {sys.version.split()[0]}, loadavg {loadavg()}")
        up_file = tmp / "up.port"
        up_argv = [sys.executable, "-m", "tests.support.upstream_server", "--transport", "http"]
        async with child([*up_argv, *port_args(up_file), "--tools", "echo"]) as up:
            up_url = f"http://127.0.0.1:{await reported_port(up_file, lambda: up.returncode)}/mcp"
            cfg = tmp / "gw.yaml"
            cfg.write_text(  # tokenless clients on purpose: anonymous access, policy current
                "gateway: {anonymous: {grant_policy: current}}\n"
                f"sources:\n  - name: h\n    http: {{url: '{up_url}'}}\n"
            )
            relay_argv = [sys.executable, str(REPO_ROOT / "bench" / "byte_relay.py"), "--upstream", up_url]
            gw_cli = {  # serve on each loop: asyncio is the product's; uvloop through a launcher (ADR 0041)
                "asyncio": [sys.executable, "-m", "mcp_reconciler.api.cli"],
                "uvloop": [sys.executable, str(REPO_ROOT / "bench" / "serve_uvloop.py")],
            }
            async with contextlib.AsyncExitStack() as procs:
                rows: list[Row] = [("direct", up_url, "echo", None)]
                for loop in LOOPS:
                    relay_file, gw_file = tmp / f"relay-{loop}.port", tmp / f"gw-{loop}.port"
                    relay = await procs.enter_async_context(
                        child([*relay_argv, "--loop", loop, "--port-file", str(relay_file)])
                    )
                    gw_argv = [*gw_cli[loop], "serve", "--config", str(cfg), *port_args(gw_file)]
                    gw = await procs.enter_async_context(child(gw_argv))
                    relay_port = await reported_port(relay_file, lambda r=relay: r.returncode)
                    gw_port = await reported_port(gw_file, lambda g=gw: g.returncode)
                    rows.append((_label("byte relay", loop), f"http://127.0.0.1:{relay_port}/mcp", "echo", relay.pid))
                    rows.append((_label("gateway", loop), f"http://127.0.0.1:{gw_port}/mcp", "h__echo", gw.pid))
                for _, url, _, _ in rows[2::2]:  # the gateways
                    async with Client(url, mode="legacy") as c:  # the source is published

                        async def listed(c: Client = c) -> bool:
                            return "h__echo" in {t.name for t in (await c.list_tools(cache_mode="bypass")).tools}

                        await until(listed, what=f"h__echo listed at {url}", timeout_s=STARTUP_S, every_s=0.1)
                result: dict[str, Any] = {}
                if PROFILE:
                    await profile(PROFILE, rows[2], tmp / "gw.raw")
                    return {}
                for era in ("legacy", "2026-07-28"):
                    result[era] = await bench_era(era, rows, up.pid)
        return {"loadavg_end": loadavg(), **result}


def main() -> int:
    out = anyio.run(amain)
    path = json_out_path(sys.argv)
    if path:
        dump_json(path, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
