"""Upstream bounds and reading cost (issue 25, ADR 0025): the SDK's stdio reader vs ours, same run.

Run from the repo root:  python bench/bench_upstream_bounds.py [--quick] [--json PATH]

Every row runs in a fresh interpreter (so peak RSS is the row's own) against a real stdio
upstream (``tests.support.upstream_server --noisy``), through ``UpstreamReader`` and
``UpstreamConnection`` as the gateway uses them. ``before`` is the SDK's ``stdio_client`` (the
transport the gateway used until issue 25, given as the target factory); ``after`` is the
default transport (``reconciler/stdio_peer.py``). The bound is raised to 64 MiB for the result
rows so both sides deliver the same answers.

A. One ``tools/call`` answered with 1, 10 and 30 MB of text: wall time, this process's CPU (the
   upstream is another process), and the event loop's lateness meanwhile (a 5 ms ticker: how
   late it wakes is how long a /healthz request would wait on the same loop): p99 and max.
B. CPU per small forwarded ``tools/call`` (200 calls, echo tool), legacy (2025-11-25) and
   2026-07-28 eras.
C. An upstream listing 100,000 tools in one page, on a connection already open: time until the
   listing fails with the diagnostic, peak RSS (``ru_maxrss``), event loop lateness p99 / max. ``before`` is the SDK's
   reader; the listing code is today's in both rows (validation stops before any entry). "own CPU in
   one tick" is the longest stretch this process held the loop: the figure the 50 ms bound is
   about (a page is parsed in slices, ``reconciler/sliced_json.py``).

Benchmarks print figures; they never assert (docs/DESIGN.md "Layout")."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(BENCH_DIR))

import anyio  # noqa: E402
import mcp_types as types  # noqa: E402
from _stats import dump_json, environment, json_out_path, pct  # noqa: E402
from mcp import stdio_client  # noqa: E402

from mcp_reconciler.reconciler.bounds import Bounds  # noqa: E402
from mcp_reconciler.reconciler.errors import SourceReadError  # noqa: E402
from mcp_reconciler.reconciler.listing import capability_kinds, list_source  # noqa: E402
from mcp_reconciler.reconciler.model import SourceSpec  # noqa: E402
from mcp_reconciler.reconciler.peer_contract import MessageBoundError  # noqa: E402
from mcp_reconciler.reconciler.transports import channel_target, stdio_parameters  # noqa: E402
from mcp_reconciler.reconciler.upstream import UpstreamReader  # noqa: E402

SERVER_MODULE = "tests.support.upstream_server"
MiB = 1024 * 1024


def spec(*args: str) -> SourceSpec:
    return SourceSpec(
        name="up",
        transport={
            "kind": "stdio",
            "command": sys.executable,
            "args": ["-m", SERVER_MODULE, "--noisy", *args],
            "cwd": str(REPO_ROOT),
        },
    )


def sdk_targets(spec: SourceSpec, on_end: Any) -> Any:
    """The transport before issue 25: the SDK's ``stdio_client`` (read end observed, as before)."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def connect() -> Any:
        with open(os.devnull, "w") as errlog:  # noqa: ASYNC230 - /dev/null never blocks
            async with stdio_client(stdio_parameters(spec.transport), errlog=errlog) as pair:
                yield pair

    return channel_target(connect, spec.name, on_end)


class Lateness:
    """A 5 ms ticker on the loop; records how late each wake-up is (ms), and how much CPU this
    process spent between two wake-ups (ms): on a shared machine a late wake-up may be the OS
    running someone else; a tick holding this much of our own CPU is our loop being busy."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.busy: list[float] = []

    async def run(self) -> None:
        while True:
            due, cpu0 = time.perf_counter() + 0.005, time.process_time()
            await anyio.sleep(0.005)
            self.samples.append(max(0.0, (time.perf_counter() - due) * 1000))
            self.busy.append((time.process_time() - cpu0) * 1000)


def cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


async def row(kind: str, impl: str, arg: int) -> dict[str, Any]:
    # As ``mcp-reconciler serve`` does (api/cli.py): the imports' objects frozen, so a full
    # garbage collection during a big parse does not walk them (it paused the loop 100-155 ms).
    gc.collect()
    gc.freeze()
    targets: dict[str, Any] = {} if impl == "after" else {"target_factory": sdk_targets}
    bounds = dataclasses.replace(Bounds(), upstream_message_bytes=64 * MiB)
    if kind == "list":
        names = Path(tempfile.mkdtemp()) / "tools.json"
        names.write_text(json.dumps([f"tool_{i}" for i in range(arg)]))
        the_spec = spec("--tools-file", str(names), "--page-size", str(arg))
        mode = "legacy"
    else:
        the_spec = spec("--tools", "echo")
        mode = "auto" if kind == "call2026" else "legacy"
    lateness = Lateness()
    out: dict[str, Any] = {"kind": kind, "impl": impl, "arg": arg}
    async with UpstreamReader(bounds=bounds, health_interval_s=None, mode=mode, **targets) as reader:
        async with anyio.create_task_group() as tg:
            if kind == "list":
                conn = await reader.open(the_spec)  # connected first: the row times the listing only
                tg.start_soon(lateness.run)
                started, c0 = time.perf_counter(), cpu()
                try:
                    await list_source(conn.send, the_spec, bounds, kinds=capability_kinds(conn.capabilities))
                    out["outcome"] = "listed"
                except SourceReadError as exc:
                    out["outcome"] = exc.reason
                except MessageBoundError as exc:
                    out["outcome"] = f"refused while read: {exc.bound} ({exc.limit})"
                out["wall_s"], out["cpu_s"] = time.perf_counter() - started, cpu() - c0
                await conn.aclose()
            else:
                conn = await reader.open(the_spec)
                if kind == "result":
                    request = types.CallToolRequest(
                        params=types.CallToolRequestParams(name="big", arguments={"bytes": arg})
                    )
                    await conn.send(request, types.CallToolResult)  # warm up: imports, first parse
                    tg.start_soon(lateness.run)
                    started, c0 = time.perf_counter(), cpu()
                    await conn.send(request, types.CallToolResult, timeout_s=600)
                    out["wall_s"], out["cpu_s"] = time.perf_counter() - started, cpu() - c0
                else:
                    request = types.CallToolRequest(
                        params=types.CallToolRequestParams(name="echo", arguments={"x": "1"})
                    )
                    for _ in range(20):
                        await conn.send(request, types.CallToolResult)
                    c0 = time.perf_counter(), cpu()
                    for _ in range(arg):
                        await conn.send(request, types.CallToolResult)
                    out["cpu_ms_per_call"] = (cpu() - c0[1]) / arg * 1000
                await conn.aclose()
            tg.cancel_scope.cancel()
    if lateness.samples:
        out["late_p99_ms"], out["late_max_ms"] = pct(lateness.samples, 99), max(lateness.samples)
        out["busy_max_ms"] = max(lateness.busy)
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_row(kind: str, impl: str, arg: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--row", kind, impl, str(arg)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        return {"kind": kind, "impl": impl, "arg": arg, "error": proc.stderr[-2000:]}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def fig(r: dict[str, Any]) -> str:
    return (
        f"{r['wall_s']:.2f} s wall, {r['cpu_s']:.2f} s CPU, loop late p99 {r['late_p99_ms']:.0f} ms"
        f" max {r['late_max_ms']:.0f} ms (own CPU in one tick max {r['busy_max_ms']:.0f} ms),"
        f" RSS {r['peak_rss_mib']:.0f} MiB"
    )


def main() -> None:
    if "--row" in sys.argv:
        i = sys.argv.index("--row")
        kind, impl, arg = sys.argv[i + 1], sys.argv[i + 2], int(sys.argv[i + 3])
        print(json.dumps(anyio.run(row, kind, impl, arg)))
        return
    quick = "--quick" in sys.argv
    results: list[dict[str, Any]] = []
    print("A. one tools/call answered with N MB over stdio (this process's CPU; loop lateness meanwhile)")
    for mb in (1, 10) if quick else (1, 10, 30):
        pair = {impl: run_row("result", impl, mb * 1_000_000) for impl in ("before", "after")}
        results += pair.values()
        b, a = pair["before"], pair["after"]
        if "error" in b or "error" in a:
            print(f"  {mb:>3} MB  error: {b.get('error') or a.get('error')}")
            continue
        print(f"  {mb:>3} MB  before: {fig(b)} | after: {fig(a)} | CPU ratio {b['cpu_s'] / max(a['cpu_s'], 1e-9):.1f}x")
    print("B. CPU per small forwarded tools/call over stdio")
    for kind, era in (("call2025", "2025-11-25"), ("call2026", "2026-07-28")):
        pair = {impl: run_row(kind, impl, 100 if quick else 200) for impl in ("before", "after")}
        results += pair.values()
        b, a = pair["before"], pair["after"]
        if "error" in b or "error" in a:
            print(f"  {era}  error: {b.get('error') or a.get('error')}")
            continue
        print(
            f"  {era}  before {b['cpu_ms_per_call']:.3f} ms | after {a['cpu_ms_per_call']:.3f} ms"
            f" | ratio {a['cpu_ms_per_call'] / b['cpu_ms_per_call']:.2f}"
        )
    n = 30_000 if quick else 100_000
    print(f"C. an upstream listing {n:,} tools in one page (bound: 10,000 entries)")
    pair = {impl: run_row("list", impl, n) for impl in ("before", "after")}
    results += pair.values()
    for impl, r in pair.items():
        if "error" in r:
            print(f"  {impl}: error: {r['error']}")
            continue
        print(
            f"  {impl:>6}: {r['outcome']!r} after {r['wall_s']:.2f} s ({r['cpu_s']:.2f} s CPU), peak RSS"
            f" {r['peak_rss_mib']:.0f} MiB, loop late p99 {r['late_p99_ms']:.0f} ms max {r['late_max_ms']:.0f} ms"
            f" (own CPU in one tick max {r['busy_max_ms']:.0f} ms)"
        )
    path = json_out_path(sys.argv)
    if path:
        dump_json(path, {"environment": environment(), "results": results})


if __name__ == "__main__":
    main()
