"""Telemetry benchmark (issue 29, ADR 0031): what metrics and the audit trail cost per forwarded
call, on and off in the same run; and what a scrape costs with the reader we chose against the
OpenTelemetry Prometheus exporter (``prometheus-client``), when that is installed.

Run from the repo root:  python bench/bench_telemetry.py [--quick] [--json PATH]

1. Two ``mcp-reconciler serve`` subprocesses on the same config (one stdio echo upstream,
   anonymous access): ``off`` (``telemetry.metrics: false``, no audit: no SDK meter provider is
   installed, every instrument is the API's no-op) and ``on`` (``/metrics`` served and scraped
   once per block, the audit trail to a file, defaults otherwise). SDK clients in this process
   call ``up__a`` sequentially, in blocks alternating off/on so both see the same background
   load. Printed: p50/p99 latency per gateway and the gateway's CPU ms per call (its own
   utime+stime from ``/proc/<pid>/stat``), and the on/off ratio (the issue's goal: ≤ 1.05).
2. Scrape cost: one MeterProvider with a catalog's worth of per-name series (200 names x 3
   outcomes of a histogram, plus counters), rendered by ``reconciler/prometheus.py``'s reader and,
   if ``opentelemetry-exporter-prometheus`` is importable, by its reader + ``generate_latest``.

Benchmarks print figures; they never assert (docs/DESIGN.md "Layout")."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import anyio  # noqa: E402
import httpx2  # noqa: E402
from _clients import cpu_s, gateway_argv, loadavg, open_client, process  # noqa: E402
from _stats import dump_json, json_out_path, pct  # noqa: E402

QUICK = "--quick" in sys.argv
CALLS, BLOCKS, WARMUP = (150, 4, 20) if QUICK else (500, 8, 50)


def _config(tmp: Path, name: str, telemetry: dict[str, Any]) -> Path:
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(
        json.dumps(
            {
                "gateway": {"anonymous": {"grant_policy": "current"}},
                "sources": [
                    {
                        "name": "up",
                        "stdio": {
                            "command": sys.executable,
                            "args": ["-m", "tests.support.upstream_server", "--tools", "a"],
                            "cwd": str(REPO_ROOT),
                        },
                    }
                ],
                "telemetry": telemetry,
            }
        )
    )
    return cfg


async def bench_calls() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        variants = {
            "off": _config(tmp, "off", {"metrics": False}),
            "on": _config(tmp, "on", {"audit": {"path": str(tmp / "audit.jsonl")}}),
        }
        lat: dict[str, list[float]] = {k: [] for k in variants}
        cpu: dict[str, float] = dict.fromkeys(variants, 0.0)
        async with contextlib.AsyncExitStack() as stack:
            pids, clients, ports = {}, {}, {}
            for name, cfg in variants.items():
                port_file = tmp / f"{name}.port"
                pids[name], port = await stack.enter_async_context(
                    process(gateway_argv(cfg, port_file), "/readyz", port_file)
                )
                ports[name] = port
                clients[name] = await open_client(stack, f"http://127.0.0.1:{port}/mcp", "legacy")
                for _ in range(WARMUP):
                    await clients[name].call_tool("up__a", {"x": "1"})
            async with httpx2.AsyncClient(headers={"authorization": "Bearer bench-operator"}) as http:
                for _ in range(BLOCKS):
                    for name in variants:
                        c0 = cpu_s(pids[name])
                        for _ in range(CALLS):
                            t0 = time.perf_counter()
                            await clients[name].call_tool("up__a", {"x": "1"})
                            lat[name].append(time.perf_counter() - t0)
                        cpu[name] += cpu_s(pids[name]) - c0
                        if name == "on":  # a scrape per block, outside the timed calls
                            await http.get(f"http://127.0.0.1:{ports[name]}/metrics")
        total = CALLS * BLOCKS
        out: dict[str, Any] = {"loadavg": loadavg(), "calls": total}
        print(f"\n1. forwarded calls, {BLOCKS} blocks x {CALLS} sequential calls per gateway (loadavg {loadavg()})")
        print(f"{'gateway':8} {'p50 ms':>8} {'p99 ms':>8} {'CPU ms/call':>12}")
        for name in variants:
            per_call = cpu[name] / total * 1000
            out[name] = {"p50_ms": pct(lat[name], 50) * 1000, "p99_ms": pct(lat[name], 99) * 1000, "cpu_ms": per_call}
            print(f"{name:8} {pct(lat[name], 50) * 1000:8.2f} {pct(lat[name], 99) * 1000:8.2f} {per_call:12.3f}")
        ratio = out["on"]["cpu_ms"] / out["off"]["cpu_ms"] if out["off"]["cpu_ms"] else float("nan")
        out["cpu_ratio"] = ratio
        print(f"gateway CPU per call, on/off: {ratio:.3f}  (goal <= 1.05)")
        return out


def bench_scrape() -> dict[str, Any]:
    from opentelemetry.sdk.metrics import MeterProvider

    from mcp_reconciler.reconciler.prometheus import PrometheusReader, seconds_views

    readers: dict[str, Any] = {"ours": PrometheusReader()}
    render: dict[str, Any] = {"ours": readers["ours"].scrape}
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import REGISTRY, generate_latest

        readers["exporter-prometheus"] = PrometheusMetricReader()
        render["exporter-prometheus"] = lambda: generate_latest(REGISTRY).decode()
    except ImportError:
        pass
    provider = MeterProvider(metric_readers=list(readers.values()), views=seconds_views())
    meter = provider.get_meter("bench")
    hist = meter.create_histogram("frontdoor.operation.duration", unit="s")
    counter = meter.create_counter("reconciler.cycles")
    for i in range(200):
        for outcome in ("ok", "upstream_unavailable", "deadline_exceeded"):
            hist.record(0.003, {"kind": "tool", "name": f"src__tool{i}", "outcome": outcome})
    counter.add(1, {"status": "published"})
    out: dict[str, Any] = {}
    print("\n2. one scrape, 600 histogram series (200 names x 3 outcomes) + a counter")
    print(f"{'reader':22} {'p50 ms':>8} {'p99 ms':>8} {'bytes':>8}")
    for name, fn in render.items():
        times, text = [], ""
        for _ in range(30 if QUICK else 100):
            t0 = time.perf_counter()
            text = fn()
            times.append(time.perf_counter() - t0)
        out[name] = {"p50_ms": pct(times, 50) * 1000, "p99_ms": pct(times, 99) * 1000, "bytes": len(text)}
        print(f"{name:22} {pct(times, 50) * 1000:8.2f} {pct(times, 99) * 1000:8.2f} {len(text):8d}")
    provider.shutdown()
    return out


def main() -> int:
    out = {"calls": anyio.run(bench_calls), "scrape": bench_scrape()}
    path = json_out_path(sys.argv)
    if path:
        dump_json(path, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
