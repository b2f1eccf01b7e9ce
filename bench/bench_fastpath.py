"""Fast-path benchmark (issue 12): what one gateway hop costs, against the same upstream called
directly, in one run on one machine.

Run from the repo root:  python bench/bench_fastpath.py [--quick] [--calls-only] [--profile] [--json PATH]
(make bench-fastpath)

Set-up: an echo upstream (``tests.support.upstream_server``) over streamable HTTP on 127.0.0.1,
and the gateway as a real ``mcp-reconciler serve`` subprocess with two sources on that program:
``h`` (the HTTP upstream) and ``s`` (its own stdio child). SDK ``Client`` instances in this
process call ``echo`` directly and through the gateway, for both eras (``legacy`` = 2025-11-25
sessions, ``auto`` = 2026-07-28). The gateway's CPU per call is its process's own utime+stime
(``/proc/<pid>/stat``) over the gateway blocks only. Rows of one era run interleaved in blocks
so they see the same background load; ``loadavg`` is printed with every table, because the box
is shared. Compare ratios within one run, not absolute figures across runs.

Two gateways run side by side on the same config and upstreams: one with the fast lane (the
default) and one with ``MCP_RECONCILER_FAST_LANE=0`` (the front door's normal lane), so both are
measured in the same run, interleaved. Since ADR 0030 the switch no longer touches the upstream
side (every request to an HTTP source takes its peer either way); to compare upstream code
before and after, run this file against each checkout in the same period.

1. Sequential calls: p50/p99 per path, added p50 (gateway - direct HTTP, as in the issue), and
   the gateway's CPU ms per call.
2. Throughput: 1, 8 and 32 concurrent sessions calling for a fixed time; calls/s and the ratio
   to direct.
3. ``tools/list`` of 1,000 tools (one page) with 1,000 legacy sessions open on a second gateway
   (one source serving 993 tools + its 7 control tools): p50/p99 of the first list of a sample of
   sessions spread over all 1,000, then of a second pass. Sessions are opened with raw HTTP
   (initialize + initialized), so the client side stays light.
4. ``--profile [--normal]`` (instead of 1-3): py-spy samples the fast (or normal) gateway at 32
   sessions; the frames with the most own time and the inclusive share per package are printed.

Benchmarks print figures; they never assert (docs/DESIGN.md "Layout")."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import anyio  # noqa: E402
import httpx2  # noqa: E402
from _ports import port_args, reported_port  # noqa: E402
from _stats import dump_json, json_out_path, pct  # noqa: E402
from mcp import Client  # noqa: E402

UPSTREAM = [sys.executable, "-m", "tests.support.upstream_server"]
ARGS = {"x": "1"}
CLK = os.sysconf("SC_CLK_TCK")
QUICK = "--quick" in sys.argv
CALLS, BLOCKS, WARMUP = (150, 3, 20) if QUICK else (600, 6, 50)
DURATION_S = 1.0 if QUICK else 3.0
LIST_SESSIONS, LIST_SAMPLE = (200, 60) if QUICK else (1000, 200)


def loadavg() -> str:
    with open("/proc/loadavg", encoding="ascii") as f:
        return " ".join(f.read().split()[:3])


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        stat = fh.read()
    f = stat[stat.rfind(b")") + 2 :].split()
    return (int(f[11]) + int(f[12])) / CLK


@contextlib.asynccontextmanager
async def process(
    argv: list[str], ready_path: str, port_file: Path, fast_lane: bool = True
) -> AsyncIterator[tuple[int, int]]:
    """Start ``argv`` (a server told to bind port 0 and write the port it got to ``port_file``),
    wait until ``ready_path`` answers there (below 500 for ``/readyz``: published), yield its pid
    and port; stop and reap it on exit. ``fast_lane`` sets ``MCP_RECONCILER_FAST_LANE``."""
    await anyio.Path(port_file).unlink(missing_ok=True)  # a rerun (bench_list twice) writes it afresh
    env = {**os.environ, "MCP_RECONCILER_OPERATOR_TOKENS": "bench-operator"}
    env["MCP_RECONCILER_FAST_LANE"] = "1" if fast_lane else "0"
    proc = await anyio.open_process(
        argv, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=None
    )
    try:
        port = await reported_port(port_file, lambda: proc.returncode)
        async with httpx2.AsyncClient() as http:
            with anyio.fail_after(60):
                while True:
                    if proc.returncode is not None:
                        raise RuntimeError(f"{argv} exited with {proc.returncode}")
                    with contextlib.suppress(httpx2.HTTPError):
                        if (await http.get(f"http://127.0.0.1:{port}{ready_path}")).status_code < 500:
                            break
                    await anyio.sleep(0.1)
        yield proc.pid, port
    finally:
        with anyio.CancelScope(shield=True):
            proc.terminate()
            with anyio.move_on_after(10):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


def gateway_argv(cfg: Path, port_file: Path) -> list[str]:
    return [sys.executable, "-m", "mcp_reconciler.api.cli", "serve", "--config", str(cfg), *port_args(port_file)]


async def open_client(stack: contextlib.AsyncExitStack, url: str, era: str) -> Any:
    c = await stack.enter_async_context(Client(url, mode=era))
    await c.list_tools()  # call_tool would otherwise list for output schemas
    return c


async def run_calls(
    clients: list[Any], tool: str, calls: int | None, duration_s: float | None
) -> tuple[list[float], float]:
    lat: list[float] = []
    deadline = time.perf_counter() + (duration_s or 0)
    t0 = time.perf_counter()

    async def loop(c: Any) -> None:
        n = 0
        while (n < calls) if calls is not None else (time.perf_counter() < deadline):
            n += 1
            s = time.perf_counter()
            r = await c.call_tool(tool, ARGS)
            lat.append((time.perf_counter() - s) * 1000)
            if r.is_error:
                raise RuntimeError(f"{tool}: error result {r}")

    async with anyio.create_task_group() as tg:
        for c in clients:
            tg.start_soon(loop, c)
    return lat, time.perf_counter() - t0


Path_ = tuple[str, str, str, "int | None"]  # label, url, tool, gateway pid (None: direct)


async def bench_calls(paths: list[Path_]) -> dict[str, Any]:
    """Sequential latency and throughput per path, both eras; rows interleaved in blocks."""
    out: dict[str, Any] = {}
    for era in ("legacy", "auto"):
        async with contextlib.AsyncExitStack() as stack:
            lat: dict[str, list[float]] = {p[0]: [] for p in paths}
            gw_cpu = {p[0]: 0.0 for p in paths}
            clients = {label: await open_client(stack, url, era) for label, url, _, _ in paths}
            for label, _, tool, _ in paths:
                await run_calls([clients[label]], tool, WARMUP, None)
            for b in range(BLOCKS):  # interleaved, rotating order
                for label, _, tool, pid in paths[b % len(paths) :] + paths[: b % len(paths)]:
                    c0 = cpu_s(pid) if pid else 0.0
                    xs, _ = await run_calls([clients[label]], tool, CALLS // BLOCKS, None)
                    gw_cpu[label] += (cpu_s(pid) - c0) if pid else 0.0
                    lat[label] += xs
            base = pct(lat[paths[0][0]], 50)
            print(f"\n[{era}] sequential {CALLS} calls per path, loadavg {loadavg()}")
            print(f"  {'path':34} {'p50 ms':>7} {'p99 ms':>7} {'added p50':>9} {'gw CPU/call ms':>14}")
            rows: dict[str, dict[str, Any]] = {}
            for label, _, _, pid in paths:
                p50, p99 = pct(lat[label], 50), pct(lat[label], 99)
                cpu = gw_cpu[label] * 1000 / len(lat[label]) if pid else None
                added = f"{p50 - base:+9.2f}" if pid else f"{'-':>9}"
                cpu_txt = f"{cpu:14.2f}" if cpu is not None else f"{'-':>14}"
                print(f"  {label:34} {p50:7.2f} {p99:7.2f} {added} {cpu_txt}")
                rows[label] = {"p50_ms": p50, "p99_ms": p99, "added_p50_ms": p50 - base, "gw_cpu_ms_per_call": cpu}
            print(f"  throughput, calls/s (x direct) [gw CPU ms/call], loadavg {loadavg()}")
            for n in (1, 8, 32):
                many = {
                    label: [clients[label]] + [await open_client(stack, url, era) for _ in range(n - 1)]
                    for label, url, _, _ in paths
                }
                tput = {}
                for label, _, tool, pid in paths:
                    c0 = cpu_s(pid) if pid else 0.0
                    xs, el = await run_calls(many[label], tool, None, DURATION_S)
                    tput[label] = len(xs) / el
                    rows[label][f"calls_per_s_{n}"] = tput[label]
                    rows[label][f"gw_cpu_ms_per_call_{n}"] = (cpu_s(pid) - c0) * 1000 / len(xs) if pid else None
                d = tput[paths[0][0]]
                print(f"  {n:2} sessions:")
                for label, _, _, _ in paths:
                    cpu_n = rows[label][f"gw_cpu_ms_per_call_{n}"]
                    extra = f" [{cpu_n:.2f}]" if cpu_n is not None else ""
                    print(f"     {label:34} {tput[label]:6.0f} ({tput[label] / d:.2f}x){extra}")
                clients.update({k: v[0] for k, v in many.items()})
            out[era] = rows
    return out


async def raw_session(http: httpx2.AsyncClient, url: str) -> str:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        },
    }
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    r = await http.post(url, json=init, headers=headers)
    sid = r.headers["mcp-session-id"]
    headers |= {"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
    await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return sid


async def list_once(http: httpx2.AsyncClient, url: str, sid: str, i: int, parse: bool = True) -> tuple[float, int]:
    """One ``tools/list``: the time until its last byte arrived (the client's own JSON parsing of
    ~300 KB, ~8 ms here, is not the gateway's) and, if ``parse``, how many tools it listed."""
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-session-id": sid,
        "mcp-protocol-version": "2025-11-25",
    }
    s = time.perf_counter()
    r = await http.post(url, json={"jsonrpc": "2.0", "id": i, "method": "tools/list"}, headers=headers)
    body = r.text
    dt = (time.perf_counter() - s) * 1000
    if not parse:
        return dt, body.count('"inputSchema"')
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        body = next(x[5:] for x in body.splitlines() if x.startswith("data:") and x[5:].strip())
    return dt, len(json.loads(body).get("result", {}).get("tools", []))


async def bench_list(tmp: Path, fast_lane: bool) -> dict[str, Any]:
    names = tmp / "tools.json"
    names.write_text(json.dumps([f"t{i:04d}" for i in range(993)]))
    cfg = tmp / "list.yaml"
    up_file, gw_file = tmp / "list-up.port", tmp / "list-gw.port"
    up = [*UPSTREAM, "--transport", "http", *port_args(up_file), "--tools-file", str(names)]
    async with contextlib.AsyncExitStack() as stack:
        _, up_port = await stack.enter_async_context(process(up, "/mcp", up_file))
        cfg.write_text(
            "gateway:\n  anonymous: {grant_policy: current}\n  limits: {transport_sessions_per_client: 4096}\n"
            f"sources:\n  - name: l\n    http: {{url: 'http://127.0.0.1:{up_port}/mcp'}}\n"
        )
        gw_pid, gw_port = await stack.enter_async_context(
            process(gateway_argv(cfg, gw_file), "/readyz", gw_file, fast_lane)
        )
        url = f"http://127.0.0.1:{gw_port}/mcp"
        async with httpx2.AsyncClient(timeout=60, limits=httpx2.Limits(max_connections=50)) as http:
            with anyio.fail_after(60):  # the catalog is published
                while (await list_once(http, url, await raw_session(http, url), 0))[1] < 1000:
                    await anyio.sleep(0.2)
            sids: list[str] = []
            while len(sids) < LIST_SESSIONS:

                async def one() -> None:
                    sids.append(await raw_session(http, url))

                async with anyio.create_task_group() as tg:
                    for _ in range(50):
                        tg.start_soon(one)
            sample = sids[:: max(1, len(sids) // LIST_SAMPLE)][:LIST_SAMPLE]
            res: dict[str, Any] = {"sessions_open": len(sids)}
            lane = "fast lane" if fast_lane else "normal lane (MCP_RECONCILER_FAST_LANE=0)"
            print(f"\ntools/list of 1,000 tools, {lane}, {len(sids)} sessions open, {len(sample)} sampled")
            print(f"  loadavg {loadavg()}")
            for phase in ("first list per session", "second pass"):
                lat, c0 = [], cpu_s(gw_pid)
                for i, sid in enumerate(sample):
                    dt, n = await list_once(http, url, sid, i + 2, parse=False)
                    assert n == 1000, n
                    lat.append(dt)
                cpu = (cpu_s(gw_pid) - c0) * 1000 / len(sample)
                print(
                    f"  {phase:24} p50 {pct(lat, 50):7.2f} ms  p99 {pct(lat, 99):7.2f} ms  "
                    f"max {max(lat):7.2f} ms  gw CPU/list {cpu:6.2f} ms"
                )
                res[phase] = {"p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "max_ms": max(lat), "gw_cpu_ms": cpu}
            return res


async def profile(gw_url: str, gw_pid: int, tmp: Path) -> None:
    """``--profile``: py-spy (if installed) samples the gateway while 32 legacy sessions call
    ``h__echo``; prints the frames with the most own time and the packages they belong to."""
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        print("\nprofile: py-spy not installed (pip install py-spy)")
        return
    out = tmp / "gw.collapsed"
    async with contextlib.AsyncExitStack() as stack:
        clients = [await open_client(stack, gw_url, "legacy") for _ in range(32)]
        rec = await anyio.open_process(
            [
                str(spy),
                "record",
                "-p",
                str(gw_pid),
                "-d",
                "8",
                "-r",
                "200",
                "-f",
                "raw",
                "-o",
                str(out),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        xs, _ = await run_calls(clients, "h__echo", None, 8.5)
        await rec.wait()
    own: dict[str, int] = {}
    pkg: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in out.read_text().splitlines():
        stack_s, _, n_s = line.rpartition(" ")
        frames, n = stack_s.split(";"), int(n_s)
        if "select (selectors.py" in frames[-1] or ("_run_once" in frames[-1] and "select" in frames[-1]):
            continue  # idle in epoll
        total += n
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for name in {f.split("(", 1)[-1].split("site-packages/")[-1].split("/")[0] for f in frames}:
            pkg[name] = pkg.get(name, 0) + n
        for f in set(frames):
            if any(
                k in f
                for k in (
                    "mcp/",
                    "api/",
                    "reconciler/",
                    "httpx2/_client",
                    "starlette/",
                    "sse_starlette",
                    "opentelemetry",
                )
            ):
                incl[f] = incl.get(f, 0) + n
    print(
        f"\nprofile: gateway at 32 legacy sessions -> h__echo, {len(xs)} calls, {total} busy samples, "
        f"loadavg {loadavg()}"
    )
    print(
        "  inclusive share by package/top folder: "
        + ", ".join(f"{k} {v * 100 // total}%" for k, v in sorted(pkg.items(), key=lambda kv: -kv[1])[:14])
    )
    print("  own time:")
    for frame, n in sorted(own.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {n * 100 / total:5.1f}%  {frame[:150]}")
    print("  inclusive (gateway, SDK, HTTP client frames):")
    for frame, n in sorted(incl.items(), key=lambda kv: -kv[1])[:40]:
        print(f"  {n * 100 / total:5.1f}%  {frame[:150]}")


async def amain() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-fastpath-") as d:
        tmp = Path(d)
        cfg = tmp / "gw.yaml"
        stdio = json.dumps([*UPSTREAM[1:], "--tools", "echo"])
        print(f"bench_fastpath: {os.cpu_count()} CPUs, python {sys.version.split()[0]}, loadavg {loadavg()}")
        if "--list-only" in sys.argv:
            return {"list": {"normal": await bench_list(tmp, False), "fast": await bench_list(tmp, True)}}
        up = [*UPSTREAM, "--transport", "http", *port_args(tmp / "up.port"), "--tools", "echo"]
        async with contextlib.AsyncExitStack() as stack:
            _, up_port = await stack.enter_async_context(process(up, "/mcp", tmp / "up.port"))
            up_url = f"http://127.0.0.1:{up_port}/mcp"
            cfg.write_text(  # tokenless clients on purpose: anonymous access, policy current
                "gateway: {anonymous: {grant_policy: current}}\nsources:\n"
                f"  - name: h\n    http: {{url: '{up_url}'}}\n"
                f"  - name: s\n    stdio: {{command: {json.dumps(sys.executable)}, args: {stdio}, "
                f"cwd: {json.dumps(str(REPO_ROOT))}}}\n"
            )
            gw_pid, gw_port = await stack.enter_async_context(
                process(gateway_argv(cfg, tmp / "gw.port"), "/readyz", tmp / "gw.port")
            )
            slow_pid, slow_port = await stack.enter_async_context(
                process(gateway_argv(cfg, tmp / "slow.port"), "/readyz", tmp / "slow.port", False)
            )
            gw_url, slow_url = f"http://127.0.0.1:{gw_port}/mcp", f"http://127.0.0.1:{slow_port}/mcp"
            for url in (gw_url, slow_url):
                async with Client(url, mode="legacy") as c:  # both sources published
                    with anyio.fail_after(60):
                        while {"h__echo", "s__echo"} - {
                            t.name for t in (await c.list_tools(cache_mode="bypass")).tools
                        }:
                            await anyio.sleep(0.2)
            if "--profile" in sys.argv:
                profile_pid = slow_pid if "--normal" in sys.argv else gw_pid
                await profile(slow_url if "--normal" in sys.argv else gw_url, profile_pid, tmp)
                return {}
            paths: list[Path_] = [
                ("direct HTTP", up_url, "echo", None),
                ("gw normal lane -> HTTP upstream", slow_url, "h__echo", slow_pid),
                ("gw fast lane   -> HTTP upstream", gw_url, "h__echo", gw_pid),
                ("gw normal lane -> stdio upstream", slow_url, "s__echo", slow_pid),
                ("gw fast lane   -> stdio upstream", gw_url, "s__echo", gw_pid),
            ]
            calls = await bench_calls(paths)
        if "--calls-only" in sys.argv:  # rows 1-2 only (e.g. the upstream side before/after)
            return {"loadavg_end": loadavg(), "calls": calls}
        lists = {"normal": await bench_list(tmp, False), "fast": await bench_list(tmp, True)}
    return {"loadavg_end": loadavg(), "calls": calls, "list": lists}


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def main() -> int:
    try:
        out = anyio.run(amain)
    except BaseExceptionGroup as group:  # show the cause, not ten nested groups
        import traceback

        for leaf in _leaves(group):
            traceback.print_exception(leaf)
        return 1
    path = json_out_path(sys.argv)
    if path:
        dump_json(path, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
