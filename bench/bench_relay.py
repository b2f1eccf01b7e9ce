"""Relay benchmark: what a server→client round trip (sampling) costs through the gateway, against
the same upstream called directly, measured in the same run over the same transport.

Run from the repo root:  python bench/bench_relay.py [--quick] [--era legacy|auto] [--json PATH] [--profile PATH]
(``--profile``: the gateway runs under cProfile and writes its stats to PATH when it stops.)

Set-up. Two ``tests.support.relay_server`` processes over streamable HTTP on 127.0.0.1: ``L``
speaks only the 2025-11-25 era (its ``sample`` tool sends a real ``sampling/createMessage``
request on the call's stream), ``M`` speaks 2026-07-28 (its ``sample`` tool answers with an
``InputRequiredResult`` and completes on the client's retry). The gateway runs as its own
process (``mcp-reconciler serve``) in front of both; the downstream clients (SDK ``Client``,
``sampling_callback`` answering at once) run in this process, with a session token minted over
the control API. Each era's client talks to the upstream of its era, directly and through the
gateway; rows run interleaved in blocks, so a comparison's two sides see the same load.

Per era: the gateway process's CPU per call of each kind (Linux ``/proc``), whose difference is
the gateway's own work for one relayed round trip (steadier than latency on a shared machine);
and the median latency of ``sample`` (one call with one sampling round trip) and of
``state`` (one plain call to the same server, no round trip), direct and through the gateway.
The relay's own cost is the round trip's share: ``(gateway sample - gateway plain) - (direct
sample - direct plain)``. Target (issue 11): <= 2 ms. The plain call's own overhead is the
front-door benchmark's subject (``bench_frontdoor.py``).

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

SELF = Path(__file__).resolve()
BENCH_DIR = SELF.parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(BENCH_DIR))

import anyio  # noqa: E402
import mcp_types as types  # noqa: E402
from _ports import port_args, reported_port  # noqa: E402
from _stats import dump_json, environment, json_out_path, pct, verdict  # noqa: E402
from _stats import median as med  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from mcp_reconciler.sdk import ReconcilerClient  # noqa: E402
from mcp_reconciler.sdk.http_client import mcp_http_client  # noqa: E402
from tests.support.waits import until  # noqa: E402

OPERATOR = "bench-relay-operator-token"
TARGET_MS = 2.0
BLOCK = 20


def spawn(argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    """A child owned by :func:`processes` (started from sync code: the event loop never blocks on it)."""
    return subprocess.Popen(argv, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, **kw)


async def wait_http(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    import httpx2

    async with httpx2.AsyncClient() as http:

        async def answers() -> bool:  # another process: any answer at all
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
            with contextlib.suppress(Exception):
                await http.get(url)
                return True
            return False

        await until(answers, what=f"{url} to answer", timeout_s=timeout_s, every_s=0.05)


@contextlib.contextmanager
def processes() -> Any:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


async def sampler(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="ok"), model="m")


@contextlib.asynccontextmanager
async def client(url: str, mode: str, token: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode, sampling_callback=sampler) as c:
            await c.list_tools(cache_mode="bypass")  # the SDK's hidden tools/list, once, before timing
            yield c


async def timed(c: Client, tool: str, n: int) -> list[float]:
    out: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        result = await c.call_tool(tool, {"prompt": "p"} if tool.endswith("sample") else {})
        out.append((time.perf_counter() - t0) * 1000)
        if result.is_error:
            raise RuntimeError(f"{tool}: {result}")
    return out


def cpu_ms(pid: int) -> float:
    """The CPU time (user + system) process ``pid`` has used, in ms (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


async def bench_era(
    mode: str, direct_url: str, gateway_url: str, prefix: str, token: str, calls: int, gateway_pid: int
) -> dict[str, Any]:
    rows: dict[str, list[float]] = {k: [] for k in ("direct sample", "direct plain", "gateway sample", "gateway plain")}
    gateway_cpu: dict[str, float] = {"gateway sample": 0.0, "gateway plain": 0.0}
    async with client(direct_url, mode) as d, client(gateway_url, mode, token) as g:
        plan = [
            ("direct sample", d, "sample"),
            ("direct plain", d, "state"),
            ("gateway sample", g, f"{prefix}sample"),
            ("gateway plain", g, f"{prefix}state"),
        ]
        for _, c, tool in plan:  # warm-up
            await timed(c, tool, 10)
        rounds = max(1, calls // BLOCK)
        for r in range(rounds):
            for i in range(len(plan)):
                name, c, tool = plan[(i + r) % len(plan)]
                before = cpu_ms(gateway_pid)
                rows[name] += await timed(c, tool, BLOCK)
                if name in gateway_cpu:
                    gateway_cpu[name] += cpu_ms(gateway_pid) - before
    medians = {k: med(v) for k, v in rows.items()}
    direct_trip = medians["direct sample"] - medians["direct plain"]
    gateway_trip = medians["gateway sample"] - medians["gateway plain"]
    per_call = {k: v / len(rows[k]) for k, v in gateway_cpu.items()}
    return {
        "era": mode,
        "gateway_cpu_ms_per_call": per_call,
        "gateway_cpu_ms_per_round_trip": per_call["gateway sample"] - per_call["gateway plain"],
        "rows": {k: {"median_ms": med(v), "p99_ms": pct(v, 99), "n": len(v)} for k, v in rows.items()},
        "round_trip_direct_ms": direct_trip,
        "round_trip_gateway_ms": gateway_trip,
        "relay_added_ms": gateway_trip - direct_trip,
        "sample_added_ms": medians["gateway sample"] - medians["direct sample"],
    }


async def amain(quick: bool, profile: str | None = None, eras: tuple[str, ...] = ("legacy", "auto")) -> dict[str, Any]:
    calls = 100 if quick else 400
    with tempfile.TemporaryDirectory() as tmp, processes() as procs:
        ports: dict[str, int] = {}
        for name, era in (("L", "legacy"), ("M", "both")):
            port_file = Path(tmp) / f"relay-{name}.port"
            argv = [sys.executable, "-m", "tests.support.relay_server", "--transport", "http"]
            argv += [*port_args(port_file), "--era", era]
            proc = spawn(argv)
            procs.append(proc)
            ports[name] = await reported_port(port_file, proc.poll)
        for name in ports:
            await wait_http(f"http://127.0.0.1:{ports[name]}/mcp", procs[0 if name == "L" else 1])
        cfg = Path(tmp) / "gateway.yaml"
        sources = [{"name": n, "http": {"url": f"http://127.0.0.1:{p}/mcp"}} for n, p in ports.items()]
        cfg.write_text(json.dumps({"gateway": {"host": "127.0.0.1"}, "sources": sources}))
        gw_port_file = Path(tmp) / "gateway.port"
        env = {**os.environ, "MCP_RECONCILER_OPERATOR_TOKENS": OPERATOR}
        gateway = [sys.executable, "-m", "mcp_reconciler.api.cli"]
        if profile:  # the gateway under cProfile; its stats are written when it stops (SIGTERM)
            gateway = [sys.executable, "-m", "cProfile", "-o", profile, "-m", "mcp_reconciler.api.cli"]
        serve = [*gateway, "serve", "--config", str(cfg), *port_args(gw_port_file)]
        procs.append(spawn(serve, env=env, stdout=subprocess.DEVNULL))
        base = f"http://127.0.0.1:{await reported_port(gw_port_file, procs[-1].poll)}"
        await wait_http(f"{base}/healthz", procs[-1])
        async with ReconcilerClient(base, OPERATOR) as rc:
            token = (await rc.create_session()).token
        out = {"environment": environment(), "loadavg": os.getloadavg(), "eras": []}
        for mode, name in (("legacy", "L"), ("auto", "M")):
            if mode not in eras:
                continue
            direct_url = f"http://127.0.0.1:{ports[name]}/mcp"
            res = await bench_era(mode, direct_url, f"{base}/mcp", f"{name}__", token, calls, procs[-1].pid)
            out["eras"].append(res)
        return out


def main() -> int:
    quick = "--quick" in sys.argv
    profile = sys.argv[sys.argv.index("--profile") + 1] if "--profile" in sys.argv else None
    eras = (sys.argv[sys.argv.index("--era") + 1],) if "--era" in sys.argv else ("legacy", "auto")
    out = anyio.run(amain, quick, profile, eras)
    print("relay: sampling round trip through the gateway vs direct (streamable HTTP, medians in ms)")
    print(f"{'client era':<12}{'row':<16}{'median':>8}{'p99':>8}")
    for era in out["eras"]:
        for row, fig in era["rows"].items():
            print(f"{era['era']:<12}{row:<16}{fig['median_ms']:>8.2f}{fig['p99_ms']:>8.2f}")
        ok = era["relay_added_ms"] <= TARGET_MS
        era["verdict"] = verdict(ok)
        print(
            f"{era['era']:<12}round trip: direct {era['round_trip_direct_ms']:.2f} ms, gateway "
            f"{era['round_trip_gateway_ms']:.2f} ms -> relay adds {era['relay_added_ms']:.2f} ms "
            f"(target <= {TARGET_MS:g} ms: {era['verdict']}); whole sample call +{era['sample_added_ms']:.2f} ms"
        )
        cpu = era["gateway_cpu_ms_per_call"]
        print(
            f"{era['era']:<12}gateway CPU per call: sample {cpu['gateway sample']:.2f} ms, plain "
            f"{cpu['gateway plain']:.2f} ms -> {era['gateway_cpu_ms_per_round_trip']:.2f} ms per relayed round trip"
        )
    print(f"load average at start: {out['loadavg']}")
    path = json_out_path(sys.argv)
    if path:
        dump_json(path, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
