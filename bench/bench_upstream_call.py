"""The upstream side's own CPU per forwarded ``tools/call``, both eras (issue 26, ADR 0037 "Call path").

Run from the repo root:  python bench/bench_upstream_call.py [--quick] [--profile] [--json PATH]

Set-up: the test upstream (``tests.support.upstream_server``, its ``echo`` tool) over streamable
HTTP on 127.0.0.1 in a subprocess (port 0, reported); in this process one
:class:`~reconciler.upstream.UpstreamConnection` per era (``legacy`` = 2025-11-25, ``auto`` =
2026-07-28) sends sequential ``tools/call`` requests the way forwarding does
(``UpstreamConnection.send_raw`` with the source's call timeout). This process runs nothing but
the upstream side — the connection, the session (``reconciler/jsonrpc_peer.py``), the HTTP peer
(``reconciler/http_peer.py``), the keep-alive pool (``reconciler/fasthttp.py``) — so its CPU per
call (``time.process_time``, over the measured calls only) is that side's cost; the server's
CPU is its own process's. Eras are interleaved in blocks so each sees the same background load.
``--profile`` prints the top functions by own CPU time (``cProfile`` with a CPU timer).

Benchmarks print figures; they never assert (docs/DESIGN.md "Layout")."""

from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO_ROOT))

import anyio  # noqa: E402
import mcp_types as types  # noqa: E402
from _stats import dump_json, json_out_path  # noqa: E402
from bench_upstream import http_server  # noqa: E402

from mcp_reconciler.reconciler.model import SourceSpec  # noqa: E402
from mcp_reconciler.reconciler.upstream import UpstreamConnection, default_targets  # noqa: E402

QUICK = "--quick" in sys.argv
SMOKE = "--smoke" in sys.argv
PROFILE = "--profile" in sys.argv
CALLS, BLOCKS, WARMUP = (20, 1, 5) if SMOKE else (500, 3, 50) if QUICK else (2000, 5, 200)
CALL_S = 300.0  # a source's default call timeout: forwarding always passes one
ERAS = {"legacy": "2025", "auto": "2026"}


async def calls(conn: UpstreamConnection, n: int, profiler: cProfile.Profile | None = None) -> tuple[float, float]:
    """``n`` sequential echo calls: CPU seconds of this process and wall seconds."""
    request = types.CallToolRequest(params=types.CallToolRequestParams(name="echo", arguments={"text": "hello"}))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if profiler is not None:
        profiler.enable()
    for _ in range(n):
        await conn.send_raw(request, timeout_s=CALL_S)
    if profiler is not None:
        profiler.disable()
    return time.process_time() - cpu0, time.perf_counter() - wall0


async def main() -> int:
    print(f"bench_upstream_call: {os.cpu_count()} CPUs, python {sys.version.split()[0]}, loadavg {os.getloadavg()}")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        async with http_server(Path(tmp)) as port, anyio.create_task_group() as tg:
            conns: dict[str, UpstreamConnection] = {}
            for mode in ERAS:
                spec = SourceSpec(name="up", transport={"kind": "http", "url": f"http://127.0.0.1:{port}/mcp"})
                conn = UpstreamConnection(spec, default_targets, mode=mode)
                await tg.start(conn.run)
                conns[mode] = conn
                await calls(conn, WARMUP)
            cpu: dict[str, list[float]] = {m: [] for m in ERAS}
            wall: dict[str, list[float]] = {m: [] for m in ERAS}
            profilers = {m: cProfile.Profile(time.process_time) for m in ERAS} if PROFILE else {}
            for _ in range(BLOCKS):
                for mode, conn in conns.items():
                    c, w = await calls(conn, CALLS, profilers.get(mode))
                    cpu[mode].append(c / CALLS * 1000)
                    wall[mode].append(w / CALLS * 1000)
            for conn in conns.values():
                await conn.aclose()
            tg.cancel_scope.cancel()
    print(f"{CALLS} calls x {BLOCKS} blocks per era, loadavg {os.getloadavg()}")
    print(f"  {'era':6} {'upstream-side CPU/call ms (median of blocks)':>44} {'wall/call ms':>13}")
    for mode, era in ERAS.items():
        results[era] = {"cpu_ms": statistics.median(cpu[mode]), "wall_ms": statistics.median(wall[mode])}
        print(f"  {era:6} {results[era]['cpu_ms']:44.3f} {results[era]['wall_ms']:13.3f}")
    for mode, prof in profilers.items():
        print(f"\n[{ERAS[mode]}] top functions by own CPU time")
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    if (path := json_out_path(sys.argv)) is not None:
        dump_json(path, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(anyio.run(main))
