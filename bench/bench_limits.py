"""Rate-limit benchmark (issue 30, ADR 0033): what a limited call costs, against an unlimited one,
in one run on one machine.

Run from the repo root:  python bench/bench_limits.py [--quick] [--json PATH]

1. **The limiter path in process**: ``Limiter.admit`` + ``Limiter.slot`` for one call under a
   typical policy (three rate rules — session, principal, total — and a concurrency rule), with
   the in-memory buckets, against the same calls with no policy: µs of CPU per call (median and
   p99 of per-batch means). With Redis (a real ``redis-server`` on loopback, the cluster store's
   Lua script): the wall time per ``admit`` (one round trip), median and p99.
2. **Forwarded calls**: three ``mcp-reconciler serve`` subprocesses on one HTTP echo upstream —
   ``unlimited``, ``limited`` (the same policy, in-memory buckets) and ``limited+redis`` (the same
   policy with ``cluster.store`` on the Redis server) — called by the SDK client in both eras,
   interleaved in blocks: p50/p99 latency, added p50 against ``unlimited``, and the gateway's own
   CPU per call (``/proc/<pid>/stat``) with the difference against ``unlimited`` in µs.

The box is shared (``loadavg`` is printed): compare within one run. Benchmarks print figures;
they never assert (docs/DESIGN.md "Layout")."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO_ROOT))

import anyio  # noqa: E402
from _clients import UPSTREAM, cpu_s, gateway_argv, loadavg, open_client, process, run_calls  # noqa: E402
from _ports import port_args  # noqa: E402
from _stats import dump_json, json_out_path, pct  # noqa: E402

from mcp_reconciler.reconciler.cluster.redis_store import RedisStore  # noqa: E402
from mcp_reconciler.reconciler.limiter import Limiter  # noqa: E402
from mcp_reconciler.reconciler.model import EntryKind  # noqa: E402
from mcp_reconciler.reconciler.rate_limits import RateLimitsConfig  # noqa: E402
from tests.support.redis_server import RedisServer, redis_binary  # noqa: E402

QUICK = "--quick" in sys.argv
BATCH, BATCHES = (500, 20) if QUICK else (1000, 60)
REDIS_CALLS = 1000 if QUICK else 5000
CALLS, BLOCKS, WARMUP = (150, 3, 20) if QUICK else (600, 6, 50)

#: Never refuses during the bench (the cost measured is the check, not a refusal).
LIMITS: dict[str, Any] = {
    "rules": [
        {"name": "per-session", "scope": "session", "rate": "1000000/s", "burst": 1000000},
        {"name": "per-principal", "scope": "principal", "rate": "1000000/s", "burst": 1000000},
        {"name": "everyone", "scope": "total", "rate": "1000000/s", "burst": 1000000},
    ],
    "concurrency": [{"name": "inflight", "max": 10000, "queue": 100}],
}


async def limiter_path(limiter: Limiter) -> list[float]:
    """µs of CPU per call (per-batch means) for admit + slot."""
    out: list[float] = []
    admit, slot, tool = limiter.take, limiter.slot, EntryKind.TOOL
    for b in range(BATCHES):
        c0 = time.thread_time()
        for i in range(BATCH):
            await admit(f"s{i & 63}", "owner::bench", tool, "h__echo", "h")
            async with slot("h"):
                pass
        out.append((time.thread_time() - c0) * 1e6 / BATCH)
        del b
    return out


async def bench_in_process(server: RedisServer) -> dict[str, Any]:
    policy = RateLimitsConfig.model_validate(LIMITS).policy()
    unlimited, limited = Limiter(), Limiter()
    limited.set_policy(policy)
    rows: dict[str, list[float]] = {"unlimited": [], "limited (memory)": []}
    for _ in range(3):  # interleaved
        rows["unlimited"] += await limiter_path(unlimited)
        rows["limited (memory)"] += await limiter_path(limited)
    print(f"\n[limiter path, in process] {BATCHES * 3} batches of {BATCH} calls, loadavg {loadavg()}")
    print(f"  {'path':22} {'CPU µs/call p50':>16} {'p99':>8}")
    for label, xs in rows.items():
        print(f"  {label:22} {pct(xs, 50):16.2f} {pct(xs, 99):8.2f}")
    added = pct(rows["limited (memory)"], 50) - pct(rows["unlimited"], 50)
    print(f"  added by the limits (memory): {added:+.2f} µs CPU per call (target ≤ 20 µs)")

    store = RedisStore(server.url, prefix="bench")
    await store.connect()
    try:
        shared = Limiter(store)
        shared.set_policy(policy)
        lat: list[float] = []
        for i in range(REDIS_CALLS):
            t0 = time.perf_counter()
            await shared.take(f"s{i & 63}", "owner::bench", EntryKind.TOOL, "h__echo", "h")
            lat.append((time.perf_counter() - t0) * 1e6)
    finally:
        await store.aclose()
    print(f"  limited (redis): admit wall µs p50 {pct(lat, 50):.0f}, p99 {pct(lat, 99):.0f} ({REDIS_CALLS} calls)")
    return {
        "unlimited_cpu_us": pct(rows["unlimited"], 50),
        "limited_memory_cpu_us": pct(rows["limited (memory)"], 50),
        "added_memory_cpu_us": added,
        "redis_admit_us_p50": pct(lat, 50),
        "redis_admit_us_p99": pct(lat, 99),
    }


def write_config(tmp: Path, name: str, up_port: int, limits: dict[str, Any] | None, redis_url: str | None) -> Path:
    doc: dict[str, Any] = {
        "gateway": {"anonymous": {"grant_policy": "current"}},
        "sources": [{"name": "h", "http": {"url": f"http://127.0.0.1:{up_port}/mcp"}}],
    }
    if limits is not None:
        doc["rate_limits"] = limits
    if redis_url is not None:
        doc["cluster"] = {"store": redis_url, "replica_id": name, "prefix": "bench-limits"}
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(json.dumps(doc))
    return cfg


async def bench_forwarded(tmp: Path, server: RedisServer) -> dict[str, Any]:
    up = [*UPSTREAM, "--transport", "http", *port_args(tmp / "up.port"), "--tools", "echo"]
    variants = [("unlimited", None, None), ("limited", LIMITS, None), ("limited+redis", LIMITS, server.url)]
    out: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        _, up_port = await stack.enter_async_context(process(up, "/mcp", tmp / "up.port"))
        paths: list[tuple[str, str, int]] = []
        for name, limits, redis_url in variants:
            cfg = write_config(tmp, name, up_port, limits, redis_url)
            port_file = tmp / f"{name}.port"  # each gateway binds port 0 and reports it
            pid, port = await stack.enter_async_context(process(gateway_argv(cfg, port_file), "/readyz", port_file))
            paths.append((name, f"http://127.0.0.1:{port}/mcp", pid))
        for era in ("legacy", "auto"):
            async with contextlib.AsyncExitStack() as clients_stack:
                clients = {label: await open_client(clients_stack, url, era) for label, url, _ in paths}
                lat: dict[str, list[float]] = {p[0]: [] for p in paths}
                cpu = {p[0]: 0.0 for p in paths}
                for label, _, _ in paths:
                    await run_calls([clients[label]], "h__echo", WARMUP, None)
                for b in range(BLOCKS):  # interleaved, rotating order
                    for label, _, pid in paths[b % len(paths) :] + paths[: b % len(paths)]:
                        c0 = cpu_s(pid)
                        xs, _ = await run_calls([clients[label]], "h__echo", CALLS // BLOCKS, None)
                        cpu[label] += cpu_s(pid) - c0
                        lat[label] += xs
                base_p50 = pct(lat["unlimited"], 50)
                base_cpu = cpu["unlimited"] * 1e6 / len(lat["unlimited"])
                print(f"\n[{era}] forwarded calls, {CALLS} per gateway, loadavg {loadavg()}")
                print(f"  {'gateway':16} {'p50 ms':>7} {'p99 ms':>7} {'added p50':>9} {'CPU µs/call':>11} {'added':>8}")
                rows: dict[str, Any] = {}
                for label, _, _ in paths:
                    p50, p99 = pct(lat[label], 50), pct(lat[label], 99)
                    per_call = cpu[label] * 1e6 / len(lat[label])
                    print(
                        f"  {label:16} {p50:7.2f} {p99:7.2f} {p50 - base_p50:+9.3f} {per_call:11.0f}"
                        f" {per_call - base_cpu:+8.0f}"
                    )
                    rows[label] = {"p50_ms": p50, "p99_ms": p99, "cpu_us_per_call": per_call}
                out[era] = rows
    return out


async def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        server = RedisServer(redis_binary(), tmp)
        await server.start()
        try:
            result = {"in_process": await bench_in_process(server), "forwarded": await bench_forwarded(tmp, server)}
        finally:
            server.close()
    path = json_out_path(sys.argv)
    if path is not None:
        dump_json(path, result)


if __name__ == "__main__":
    anyio.run(main)
