"""Upstream bounds and reading cost (issue 25, ADR 0025): the SDK's stdio reader vs ours, same run.

Run from the repo root:  python bench/bench_upstream_bounds.py [--quick] [--served-only] [--before REF] [--json PATH]

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

D. Through a served gateway (``mcp-reconciler serve`` under ``tests/support/loop_probe.py``: a
   probe on its event loop) per upstream transport (stdio; streamable HTTP answering in the
   2025-11-25 era, a 2025-only server; and in the 2026-07-28 era): a 1, 10 and 30 MB
   ``tools/call`` result from a raw client in its own process (2026-era POST; the 30 MB one also
   on a 2025 session) — wall time, the gateway process's CPU, ``/healthz`` p99 and max from a
   third process meanwhile, and the gateway's loop meanwhile (worst lateness of a 5 ms ticker;
   the longest stretch of its own CPU between two ticks: the 50 ms bound of ADR 0040). Then
   abandoned calls: a ``block`` call whose client is killed (does the upstream see the
   cancellation?) and a 100 MB answer whose client is killed after 0.5 s (seconds until the
   gateway's CPU is idle). ``before`` runs the code of ``--before REF`` (default ``main``,
   exported with ``git archive``), ``after`` this tree; same run, alternating per transport.

Benchmarks print figures; they never assert (docs/DESIGN.md "Layout")."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import resource
import signal
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
from anyio.streams.text import TextReceiveStream  # noqa: E402
from mcp import stdio_client  # noqa: E402

from mcp_reconciler.reconciler.bounds import Bounds  # noqa: E402
from mcp_reconciler.reconciler.errors import SourceReadError  # noqa: E402
from mcp_reconciler.reconciler.listing import capability_kinds, list_source  # noqa: E402
from mcp_reconciler.reconciler.model import SourceSpec  # noqa: E402
from mcp_reconciler.reconciler.peer_contract import MessageBoundError  # noqa: E402
from mcp_reconciler.reconciler.transports import channel_target, stdio_parameters  # noqa: E402
from mcp_reconciler.reconciler.upstream import UpstreamReader  # noqa: E402
from tests.support.waits import file_text  # noqa: E402

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
            await anyio.sleep(0.005)  # the probe's period: how late the loop wakes it is the measure
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


# --- D. through a served gateway (ADR 0040) ---------------------------------------------------

#: A raw client in its own process: one ``tools/call`` on ``/mcp`` (2026-07-28: one POST;
#: 2025-11-25: initialize first), the answer read as bytes and not parsed (the client's parse
#: is not the gateway's cost). Prints the HTTP status, the byte count and the answer's tail.
CLIENT = """
import http.client, json, sys
host, port, era, token, tool = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
args = json.loads(sys.argv[6])
conn = http.client.HTTPConnection(host, port, timeout=600)
base = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
base["authorization"] = "Bearer " + token
info = {"name": "bench", "version": "1"}
def post(body, headers):
    conn.request("POST", "/mcp", json.dumps(body).encode(), headers)
    r = conn.getresponse()
    return r, r.read()
call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}
if era == "2026":
    v, p = "2026-07-28", "io.modelcontextprotocol/"
    call["params"]["_meta"] = {p + "protocolVersion": v, p + "clientInfo": info, p + "clientCapabilities": {}}
    r, data = post(call, {**base, "mcp-protocol-version": v, "mcp-method": "tools/call", "mcp-name": tool})
else:
    v = "2025-11-25"
    init = {"protocolVersion": v, "capabilities": {}, "clientInfo": info}
    r, _ = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}, base)
    h = {**base, "mcp-session-id": r.getheader("mcp-session-id"), "mcp-protocol-version": v}
    post({"jsonrpc": "2.0", "method": "notifications/initialized"}, h)
    r, data = post(call, h)
print(json.dumps({"status": r.status, "bytes": len(data), "tail": data[-120:].decode("latin-1")}))
"""

#: ``/healthz`` asked back to back from a process of its own until its stdin closes; prints
#: every latency in seconds.
HEALTH_PROBE = """
import http.client, json, sys, threading, time
host, port = sys.argv[1], int(sys.argv[2])
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
conn = http.client.HTTPConnection(host, port, timeout=60)
took = []
print("ready", flush=True)
while not done.is_set():
    started = time.perf_counter()
    conn.request("GET", "/healthz")
    conn.getresponse().read()
    took.append(time.perf_counter() - started)
    done.wait(0.01)
print(json.dumps(took), flush=True)
"""

TOKEN = "bench-bounds-session-token-0123456789"
TRANSPORTS = ("stdio", "http-2025", "http-2026")


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def before_tree(ref: str) -> str:
    """A ``PYTHONPATH`` entry under which ``mcp_reconciler`` is ``ref``'s code (``git archive``:
    a plain export, nothing in the repository's worktrees changes)."""
    root = Path(tempfile.mkdtemp(prefix="bench-before-"))
    tree, ns = root / "tree", root / "ns" / "mcp_reconciler"
    tree.mkdir()
    ns.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", ref], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    for package in ("api", "reconciler", "sdk", "examples"):
        (ns / package).symlink_to(tree / package)
    return str(root / "ns")


async def wait_for_file(path: Path, timeout_s: float) -> bool:
    """Whether ``path`` exists (with content) within ``timeout_s`` (a file another process writes)."""
    try:
        await file_text(path, timeout_s=timeout_s)
    except AssertionError:  # not within timeout_s: the caller says what that means
        return False
    return True


class Served:
    """An upstream (stdio, or HTTP in one era) behind ``mcp-reconciler serve`` with a probe on its
    loop (``tests/support/loop_probe.py``), running ``impl``'s code (``after``: this tree;
    ``before``: ``pythonpath``'s)."""

    def __init__(self, transport: str, pythonpath: str | None) -> None:
        self.transport, self.pythonpath = transport, pythonpath
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-served-"))
        self.procs: list[subprocess.Popen[bytes]] = []

    async def __aenter__(self) -> Served:
        upstream = [sys.executable, "-m", SERVER_MODULE, "--tools", "a", "--noisy"]
        if self.transport == "stdio":
            source: dict[str, Any] = {"stdio": {"command": upstream[0], "args": upstream[1:], "cwd": str(REPO_ROOT)}}
        else:
            port_file = self.tmp / "upstream.port"
            era = ["--era", "legacy"] if self.transport == "http-2025" else []
            self.spawn([*upstream, "--transport", "http", "--port", "0", "--port-file", str(port_file), *era])
            assert await wait_for_file(port_file, 60), "the upstream never reported its port"
            source = {"http": {"url": f"http://127.0.0.1:{port_file.read_text().strip()}/mcp"}}
        config = self.tmp / "gateway.json"
        limits = {"upstream_message_bytes": 256 * MiB}  # the abandoned 100 MB answer is read, not refused
        sessions = [{"name": "c", "token": TOKEN, "grant_policy": "current"}]
        config.write_text(
            json.dumps({"gateway": {"limits": limits}, "sessions": sessions, "sources": [{"name": "up", **source}]})
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        port_file, self.stats_file = self.tmp / "gateway.port", self.tmp / "loop.json"
        gateway = [sys.executable, "-m", "tests.support.loop_probe", "--config", str(config)]
        self.gateway = self.spawn([*gateway, "--port-file", str(port_file), "--stats-file", str(self.stats_file)], env)
        assert await wait_for_file(port_file, 60), "the gateway never reported its port"
        self.port = int(port_file.read_text())
        with anyio.fail_after(60):
            while (await self.call("2026", "up__a", {}))["status"] != 200:
                await anyio.sleep(0.1)  # the first cycle lists the source
        return self

    async def __aexit__(self, *exc: object) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            proc.wait(timeout=30)

    def spawn(self, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def client(self, era: str, tool: str, args: dict[str, Any]) -> list[str]:
        return [sys.executable, "-c", CLIENT, "127.0.0.1", str(self.port), era, TOKEN, tool, json.dumps(args)]

    async def call(self, era: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        done = await anyio.run_process(self.client(era, tool, args), check=False)
        return dict(json.loads(done.stdout)) if done.returncode == 0 else {"status": -1}

    async def loop(self) -> dict[str, float]:
        """The gateway loop's figures since the last call (the probe's report on SIGUSR1)."""
        self.stats_file.unlink(missing_ok=True)
        self.gateway.send_signal(signal.SIGUSR1)
        assert await wait_for_file(self.stats_file, 30), "the loop probe never reported"
        return dict(json.loads(self.stats_file.read_text()))

    async def measured(self, era: str, size: int) -> dict[str, Any]:
        """One call of ``size`` bytes: wall time, gateway CPU, /healthz p99 and max meanwhile
        (another process), the gateway's loop figures meanwhile."""
        await self.loop()  # reset
        probe = await anyio.open_process([sys.executable, "-c", HEALTH_PROBE, "127.0.0.1", str(self.port)])
        assert probe.stdin is not None and probe.stdout is not None
        async with probe:
            lines = TextReceiveStream(probe.stdout)
            assert (await lines.receive()).strip() == "ready"
            started, cpu0 = time.perf_counter(), proc_cpu_s(self.gateway.pid)
            answer = await self.call(era, "up__big", {"bytes": size})
            wall, spent = time.perf_counter() - started, proc_cpu_s(self.gateway.pid) - cpu0
            await probe.stdin.aclose()
            took = json.loads("".join([chunk async for chunk in lines]))
        ok = answer.get("status") == 200 and answer.get("bytes", 0) >= size
        return {
            "ok": ok,
            "answer": answer if not ok else None,
            "wall_s": wall,
            "cpu_s": spent,
            "healthz_p99_ms": pct(took, 99) * 1000,
            "healthz_max_ms": max(took) * 1000,
            **await self.loop(),
        }

    async def abandoned(self) -> dict[str, Any]:
        """A call the client gives up on: does the upstream see it cancelled (``block``: its
        marker files), and how long is the gateway busy after a client leaves a 100 MB answer?"""
        marker, cancelled = self.tmp / "in-flight", self.tmp / "cancelled"
        client = await anyio.open_process(
            # 2026-07-28: the client closing its stream is the cancellation (2025 clients send
            # notifications/cancelled, which a killed client cannot)
            self.client("2026", "up__block", {"marker": str(marker), "cancelled": str(cancelled)})
        )
        async with client:
            running = await wait_for_file(marker, 30)
            client.kill()
        seen = running and await wait_for_file(cancelled, 10)
        client = await anyio.open_process(self.client("2026", "up__big", {"bytes": 100_000_000}))
        async with client:
            with anyio.move_on_after(0.5):
                await client.wait()
            client.kill()  # gone while the answer is read or sent
        left = time.perf_counter()
        with anyio.move_on_after(120):
            while True:  # idle: under 5 % of a core over a quarter second
                cpu0 = proc_cpu_s(self.gateway.pid)
                await anyio.sleep(0.25)  # a CPU reading needs a window of time: the measure, not a wait
                if proc_cpu_s(self.gateway.pid) - cpu0 < 0.0125:
                    break
        return {"upstream_saw_cancel": seen, "idle_after_s": time.perf_counter() - left}


async def served_rows(
    transport: str, impl: str, pythonpath: str | None, sizes: tuple[int, ...]
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    async with Served(transport, pythonpath) as served:
        for mb in sizes:
            for era in ("2026", "2025") if mb == sizes[-1] else ("2026",):
                row = {"kind": "served", "transport": transport, "impl": impl, "mb": mb, "client_era": era}
                rows.append({**row, **await served.measured(era, mb * 1_000_000)})
        rows.append({"kind": "abandoned", "transport": transport, "impl": impl, **await served.abandoned()})
    return rows


def served_fig(r: dict[str, Any]) -> str:
    if not r.get("ok", True):
        return f"FAILED {r.get('answer')}"
    return (
        f"{r['wall_s']:5.2f} s, CPU {r['cpu_s']:4.2f} s, /healthz p99 {r['healthz_p99_ms']:4.0f} max"
        f" {r['healthz_max_ms']:4.0f} ms, loop late max {r['late_max_ms']:4.0f} ms, own stretch max"
        f" {r['own_max_ms']:3.0f} ms"
    )


def served_section(quick: bool, before_ref: str) -> list[dict[str, Any]]:
    sizes = (1, 10) if quick else (1, 10, 30)
    pythonpath = before_tree(before_ref)
    print(
        f"D. through a served gateway (mcp-reconciler serve, a probe on its loop): N MB results per upstream"
        f" transport; before = {before_ref}, after = this tree (bound raised to 256 MiB)"
    )
    results: list[dict[str, Any]] = []
    for transport in TRANSPORTS:
        pair = {
            impl: anyio.run(served_rows, transport, impl, path, sizes)
            for impl, path in (("before", pythonpath), ("after", None))
        }
        for before, after in zip(pair["before"], pair["after"], strict=True):
            results += [before, after]
            if before["kind"] == "abandoned":
                print(
                    f"  {transport:9s} abandoned: upstream saw the cancel before {before['upstream_saw_cancel']} /"
                    f" after {after['upstream_saw_cancel']}; gateway idle {before['idle_after_s']:.2f} s /"
                    f" {after['idle_after_s']:.2f} s after a client left a 100 MB answer"
                )
                continue
            label = f"{transport:9s} {before['mb']:>2} MB (client {before['client_era']})"
            print(f"  {label}  before: {served_fig(before)}")
            print(f"  {' ' * len(label)}   after: {served_fig(after)}")
    return results


def main() -> None:
    if "--row" in sys.argv:
        i = sys.argv.index("--row")
        kind, impl, arg = sys.argv[i + 1], sys.argv[i + 2], int(sys.argv[i + 3])
        print(json.dumps(anyio.run(row, kind, impl, arg)))
        return
    quick = "--quick" in sys.argv
    results: list[dict[str, Any]] = []
    if "--served-only" in sys.argv:
        results += served_section(quick, _before_ref())
        path = json_out_path(sys.argv)
        if path:
            dump_json(path, {"environment": environment(), "results": results})
        return
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
    results += served_section(quick, _before_ref())
    path = json_out_path(sys.argv)
    if path:
        dump_json(path, {"environment": environment(), "results": results})


def _before_ref() -> str:
    return sys.argv[sys.argv.index("--before") + 1] if "--before" in sys.argv else "main"


if __name__ == "__main__":
    main()
