"""Upstream benchmarks: list_changed freshness latency and memory under reconnect churn.

Run from the repo root:  python bench/bench_upstream.py [--json PATH] [--quick]

A. Freshness latency. A real 100-tool upstream (``tests.support.upstream_server``; 100 catalog
   tools + 4 control tools = 104, two pages of 100) runs over stdio and over streamable HTTP on
   127.0.0.1, read by ``UpstreamReader`` + ``Reconciler`` with ``Bounds(cooldown_s=0)`` (the
   cooldown is excluded), in both protocol eras (``legacy`` = 2025-11-25 pushed notifications,
   ``auto`` = 2026-07-28 ``subscriptions/listen``). One sample: t0 is taken right before the
   gateway sends the upstream's ``set_tools`` call (a changed list of 100 names) on its live
   connection; the upstream announces ``tools/list_changed``; t1 is taken by a runtime listener
   when the revision containing the new names is published. Same-run baselines against the same
   server program: one direct SDK ``Client`` listing every page of tools (what any re-list costs),
   and one echo ``tools/call`` round trip on the gateway's connection (the transport's floor).
   Target (the issue): median <= 50 ms.

B. RSS after 1,000 reconnect cycles of a dying upstream, in process. The upstream is a real
   ``mcp.server.Server`` (100 tools) served over in-memory streams by a target factory whose
   session's end is observed by the reconciler's own session (``channel_target``); each cycle the bench
   stops that server (its streams close), the reader sees the stream end (the production death
   path), marks the source dirty, and the reconciler reconnects (``Backoff`` with zero delays),
   re-lists and publishes. RSS (``/proc/self/statm``) is sampled after ``gc.collect()`` every
   100 cycles. Target: flat from cycle 100 to 1,000 (no growth beyond noise); open connections
   and live generations at the end are small constants.

C. 50 real stdio reconnect cycles: the upstream subprocess is told to crash (``os._exit``) each
   cycle; the reader detects the EOF and respawns it. Reports RSS and that no child remains.

Benchmarks print figures; they never assert (docs/DESIGN.md "Layout")."""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(BENCH_DIR))

import anyio  # noqa: E402
import mcp_types as types  # noqa: E402
from _ports import port_args, reported_port  # noqa: E402
from _stats import dump_json, environment, fmt_bytes, json_out_path, summary, verdict  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.server import Server, ServerRequestContext  # noqa: E402
from mcp.shared.memory import create_client_server_memory_streams  # noqa: E402

from mcp_reconciler.reconciler.bounds import Bounds  # noqa: E402
from mcp_reconciler.reconciler.desired import StaticDesiredState  # noqa: E402
from mcp_reconciler.reconciler.generation import Generation  # noqa: E402
from mcp_reconciler.reconciler.model import SourceSpec, SourceStatus  # noqa: E402
from mcp_reconciler.reconciler.reconcile import Reconciler, new_trigger_queue  # noqa: E402
from mcp_reconciler.reconciler.runtime import LiveGeneration, Runtime  # noqa: E402
from mcp_reconciler.reconciler.throttle import Backoff  # noqa: E402
from mcp_reconciler.reconciler.transports import channel_target  # noqa: E402
from mcp_reconciler.reconciler.upstream import UpstreamConnection, UpstreamReader  # noqa: E402
from tests.support.children import child_pids  # noqa: E402
from tests.support.waits import file_text, until  # noqa: E402

SERVER_MODULE = "tests.support.upstream_server"
N_TOOLS = 100
FRESH_SAMPLES = 100
FRESH_WARMUP = 3
BASELINE_SAMPLES = 100
CHURN_CYCLES = 1_000
CHURN_SAMPLE_EVERY = 100
STDIO_CYCLES = 50
WAIT_S = 15.0
START_S = 60.0  # a hang guard on the upstream's start; it took more than 15 s at load 13
TARGET_MEDIAN_MS = 50.0
PAGE = os.sysconf("SC_PAGE_SIZE")


# -- shared helpers -------------------------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * PAGE


class GcPauses:
    """Records this process's generation-2 garbage collections (start, duration) while active."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float]] = []
        self._start = 0.0

    def _cb(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.pauses.append((self._start, time.perf_counter() - self._start))

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._cb)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._cb)

    def inside(self, windows: list[tuple[float, float]]) -> list[float]:
        """Durations (ms) of the pauses that overlap any (start, end) window."""
        return [d * 1000 for (t, d) in self.pauses if any(t < e and t + d > s for s, e in windows)]


def tool_names(tag: str) -> list[str]:
    return [f"{tag}_t{i:03d}" for i in range(N_TOOLS)]


class Publications:
    """A runtime listener: wall time (perf_counter) of each publication, and a bounded wait for
    a generation matching a predicate. Keeps no reference to old generations."""

    def __init__(self, rec: Reconciler) -> None:
        self._rec = rec
        self.count = 0
        self.last_at = 0.0
        self._event = anyio.Event()
        rec.runtime.add_listener(self._on_publish)

    def _on_publish(self, _new: Generation, _previous: Generation | None) -> None:
        self.last_at = time.perf_counter()
        self.count += 1
        event, self._event = self._event, anyio.Event()
        event.set()

    async def wait_for(self, predicate: Callable[[Generation], bool], timeout_s: float = WAIT_S) -> Generation:
        with anyio.fail_after(timeout_s):
            while True:
                event = self._event
                live = self._rec.runtime.current
                if live is not None and predicate(live.generation):
                    return live.generation
                await event.wait()


async def quiescent(rec: Reconciler, timeout_s: float = WAIT_S) -> None:
    """Wait (bounded) until no cycle runs and nothing is dirty."""
    idle = lambda: not (rec.reconciling or rec.queue.dirty)  # noqa: E731
    await until(idle, what="a quiet engine", timeout_s=timeout_s, every_s=0.001)
    await anyio.sleep(0.005)  # a settle before the next measurement (closes after the last cycle), not a wait


def connection(gen: Generation, source: str = "up") -> UpstreamConnection:
    state = gen.source_state(source)
    assert state is not None and isinstance(state.connection, UpstreamConnection)
    return state.connection


def ready_on_new_connection(previous: UpstreamConnection | None) -> Callable[[Generation], bool]:
    def check(g: Generation) -> bool:
        state = g.source_state("up")
        return (
            state is not None
            and state.status is SourceStatus.READY
            and state.connection is not None
            and state.connection is not previous
        )

    return check


async def gateway_call(rec: Reconciler, tool: str, args: dict[str, Any]) -> types.CallToolResult:
    """The hot path: pin the current generation, forward on the source's connection, release."""
    live = rec.runtime.current
    assert live is not None
    conn = connection(live.generation)
    async with live.operation():
        return await conn.send(
            types.CallToolRequest(params=types.CallToolRequestParams(name=tool, arguments=args)),
            types.CallToolResult,
            timeout_s=WAIT_S,
        )


@asynccontextmanager
async def engine(
    spec: SourceSpec, bounds: Bounds, **reader_kw: Any
) -> AsyncIterator[tuple[UpstreamReader, Reconciler, Publications]]:
    queue = new_trigger_queue(bounds)
    async with UpstreamReader(bounds=bounds, on_dirty=queue.add, **reader_kw) as reader:
        async with Reconciler(StaticDesiredState([spec]), reader, bounds=bounds, queue=queue) as rec:
            yield reader, rec, Publications(rec)


# -- A. freshness latency ---------------------------------------------------------------------------


@asynccontextmanager
async def http_server(tmp: Path, *server_args: str) -> AsyncIterator[int]:
    """The test upstream over streamable HTTP on 127.0.0.1, killed (SIGKILL) and reaped on exit."""
    pid_file = Path(tempfile.mkdtemp(dir=tmp)) / "http.pid"
    port_file = pid_file.with_suffix(".port")
    argv = [sys.executable, "-m", SERVER_MODULE, "--transport", "http", *port_args(port_file)]
    proc = await anyio.open_process(
        [*argv, "--pid-file", str(pid_file), *server_args],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=None,
        stderr=None,
    )
    try:
        # a process start: seconds on a busy box (bench smoke in CI)
        await file_text(pid_file, writer_exit=lambda: proc.returncode, timeout_s=START_S)
        yield await reported_port(port_file, lambda: proc.returncode)  # written before the pid file
    finally:
        with anyio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.kill()
            with anyio.fail_after(5):
                await proc.wait()


def stdio_transport(*server_args: str) -> dict[str, Any]:
    return {
        "kind": "stdio",
        "command": sys.executable,
        "args": ["-m", SERVER_MODULE, *server_args],
        "cwd": str(REPO_ROOT),
    }


async def direct_list_baseline(target: Any, mode: str, samples: int) -> tuple[list[float], int, int]:
    """Times (ms) of one complete tools listing (every page) by a plain SDK Client."""
    out: list[float] = []
    pages = tools = 0
    async with Client(target, mode=mode, cache=None) as c:
        for i in range(samples + FRESH_WARMUP):
            t0 = time.perf_counter()
            cursor: str | None = None
            pages = tools = 0
            while True:
                page = await c.list_tools(cursor=cursor)
                pages += 1
                tools += len(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            if i >= FRESH_WARMUP:
                out.append((time.perf_counter() - t0) * 1000)
    return out, pages, tools


async def freshness_run(spec: SourceSpec, mode: str, samples: int) -> dict[str, Any]:
    bounds = Bounds(cooldown_s=0.0)
    lat: list[float] = []
    call_rtt: list[float] = []
    windows: list[tuple[float, float]] = []
    slow: list[tuple[float, float]] = []  # windows of samples over 2x the running median
    gcmon = GcPauses()
    with gcmon:
        async with engine(spec, bounds, mode=mode, health_interval_s=None) as (reader, rec, pubs):
            gen = await pubs.wait_for(ready_on_new_connection(None))
            conn = connection(gen)
            version = conn.protocol_version
            cycles0, pubs0 = rec.cycles, pubs.count
            for k in range(samples + FRESH_WARMUP):
                await quiescent(rec)
                names = tool_names(f"s{k}")
                marker = f"up__{names[0]}"
                results: list[types.CallToolResult] = []

                async def set_tools(names: list[str] = names, results: list[types.CallToolResult] = results) -> None:
                    results.append(await gateway_call(rec, "set_tools", {"names": names}))

                async with anyio.create_task_group() as tg:
                    t0 = time.perf_counter()
                    tg.start_soon(set_tools)
                    await pubs.wait_for(lambda g, marker=marker: marker in g.tools)
                    t1 = pubs.last_at
                assert results and not results[0].is_error
                if k >= FRESH_WARMUP:
                    lat.append((t1 - t0) * 1000)
                    windows.append((t0, t1))
                    if lat[-1] > 2 * statistics.median(lat):
                        slow.append((t0, t1))
            await quiescent(rec)
            cycles = rec.cycles - cycles0
            publications = pubs.count - pubs0
            live = rec.runtime.current
            assert live is not None
            echo = next(n for n in live.generation.tools if not n.endswith(("block", "crash", "flood", "set_tools")))
            upstream_echo = live.generation.tools[echo].upstream_name
            for i in range(BASELINE_SAMPLES + FRESH_WARMUP):
                t0 = time.perf_counter()
                await gateway_call(rec, upstream_echo, {"x": "1"})
                if i >= FRESH_WARMUP:
                    call_rtt.append((time.perf_counter() - t0) * 1000)
            opened = reader.opened
    return {
        "protocol": version,
        "latency_ms": summary(lat),
        "call_rtt_ms": summary(call_rtt),
        "cycles_per_sample": cycles / (samples + FRESH_WARMUP),
        "publications_per_sample": publications / (samples + FRESH_WARMUP),
        "connections_opened": opened,
        "slow_samples": len(slow),
        "slow_samples_with_gateway_gen2_gc": sum(1 for w in slow if gcmon.inside([w])),
        "gateway_gen2_gc_ms_in_samples": gcmon.inside(windows),
    }


def print_freshness_row(key: str, run: dict[str, Any]) -> None:
    lat, lst, rtt = run["latency_ms"], run["direct_list_ms"], run["call_rtt_ms"]
    gcs = run["gateway_gen2_gc_ms"] = run.pop("gateway_gen2_gc_ms_in_samples")
    print(
        f"  {key:<22} {run['protocol']:<11} {lat['median']:>7.2f} {lat['p99']:>7.2f} "
        f"{lst['median']:>7.2f} {lst['p99']:>7.2f} {rtt['median']:>6.2f} "
        f"{lat['median'] - lst['median'] - rtt['median']:>6.2f} {run['cycles_per_sample']:>5.2f} "
        f"{len(gcs):>3} {max(gcs, default=0):>5.1f} "
        f"{run['slow_samples']:>2}/{run['slow_samples_with_gateway_gen2_gc']:<2} "
        f"{verdict(lat['median'] <= TARGET_MEDIAN_MS)}",
        flush=True,
    )


async def bench_freshness(samples: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    initial = ",".join(tool_names("init"))
    stdio_target = StdioServerParameters(
        command=sys.executable, args=["-m", SERVER_MODULE, "--tools", initial], cwd=str(REPO_ROOT)
    )
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        for transport in ("stdio", "http"):
            for mode in ("legacy", "auto"):
                key = f"{transport}/{mode}"
                if transport == "stdio":
                    spec = SourceSpec(name="up", transport=stdio_transport("--tools", initial))
                    run = await freshness_run(spec, mode, samples)
                    base, pages, ntools = await direct_list_baseline(stdio_target, mode, BASELINE_SAMPLES)
                else:
                    async with http_server(tmp, "--tools", initial) as port:
                        url = f"http://127.0.0.1:{port}/mcp"
                        spec = SourceSpec(name="up", transport={"kind": "http", "url": url})
                        run = await freshness_run(spec, mode, samples)
                        base, pages, ntools = await direct_list_baseline(url, mode, BASELINE_SAMPLES)
                run["direct_list_ms"] = summary(base)
                run["direct_list_pages"] = pages
                run["direct_list_tools"] = ntools
                results[key] = run
                print_freshness_row(key, run)
        # The same stdio/legacy run with the gateway's heap frozen (gc.freeze() after start-up):
        # separates the gateway's own full-collection pauses from everything else in the tail.
        gc.collect()
        gc.freeze()
        try:
            spec = SourceSpec(name="up", transport=stdio_transport("--tools", initial))
            run = await freshness_run(spec, "legacy", samples)
            base, pages, ntools = await direct_list_baseline(stdio_target, "legacy", BASELINE_SAMPLES)
        finally:
            gc.unfreeze()
        run["direct_list_ms"] = summary(base)
        run["direct_list_pages"] = pages
        run["direct_list_tools"] = ntools
        results["stdio/legacy+gc.freeze"] = run
        print_freshness_row("stdio/legacy+gc.freeze", run)
    return results


# -- B. in-process reconnect churn ------------------------------------------------------------------


def make_inproc_server() -> Server[Any]:
    tools = [
        types.Tool(
            name=n,
            description=f"echo tool {n}",
            input_schema={"type": "object", "properties": {"x": {"type": "string"}}},
        )
        for n in tool_names("churn")
    ]

    async def list_tools(
        _ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    return Server("churn-upstream", version="1.0", on_list_tools=list_tools)


class DyingTargets:
    """Target factory: each connection gets its own in-memory transport to ``server``, its read
    stream observed exactly like the production transports'. :meth:`kill_latest` stops the
    server side of the newest connection: its streams close and the client sees the stream end."""

    def __init__(self, server: Server[Any]) -> None:
        self._server = server
        self._latest: anyio.CancelScope | None = None
        self.made = 0

    def __call__(self, spec: SourceSpec, on_end: Callable[[], None]) -> Any:
        self.made += 1
        return channel_target(self._transport, spec.name, on_end)

    def kill_latest(self) -> None:
        scope, self._latest = self._latest, None
        if scope is not None:
            scope.cancel()

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        server = self._server
        scope = anyio.CancelScope()
        self._latest = scope
        async with create_client_server_memory_streams() as (client_streams, server_streams):
            client_read, client_write = client_streams
            server_read, server_write = server_streams

            async def run_server() -> None:
                with scope:
                    await server.run(server_read, server_write, server.create_initialization_options())
                # The "process" is gone: close its ends so the client's read stream ends.
                await server_write.aclose()
                await server_read.aclose()

            async with anyio.create_task_group() as tg:
                tg.start_soon(run_server)
                try:
                    yield client_read, client_write
                finally:
                    scope.cancel()


def count_instances(cls: type) -> int:
    return sum(1 for o in gc.get_objects() if type(o) is cls)


async def bench_churn(cycles: int, mode: str) -> dict[str, Any]:
    targets = DyingTargets(make_inproc_server())
    bounds = Bounds(cooldown_s=0.0)
    backoff = Backoff(cooldown_s=0.0, base_s=0.0, cap_s=0.0)
    spec = SourceSpec(name="up", transport={"kind": "inproc"})
    series: list[tuple[int, int]] = []
    gc.collect()
    conns_before = count_instances(UpstreamConnection)
    t_start = time.perf_counter()
    async with engine(spec, bounds, target_factory=targets, mode=mode, backoff=backoff, health_interval_s=None) as (
        reader,
        rec,
        pubs,
    ):
        gen = await pubs.wait_for(ready_on_new_connection(None))
        conn = connection(gen)
        rev0, opened0 = gen.revision, reader.opened
        gc.collect()
        rss0 = rss_bytes()
        for i in range(1, cycles + 1):
            targets.kill_latest()
            gen = await pubs.wait_for(ready_on_new_connection(conn))
            conn = connection(gen)
            if i % CHURN_SAMPLE_EVERY == 0:
                await quiescent(rec)
                gc.collect()
                series.append((i, rss_bytes()))
        elapsed = time.perf_counter() - t_start
        await quiescent(rec)
        gc.collect()
        result = {
            "mode": mode,
            "protocol": conn.protocol_version,
            "cycles": cycles,
            "elapsed_s": elapsed,
            "ms_per_cycle": elapsed / cycles * 1000,
            "rss_start": rss0,
            "rss_series": series,
            "revisions": gen.revision - rev0,
            "connections_opened": reader.opened - opened0,
            "open_connections_end": reader.open_connections(),
            "live_generations_end": len(rec.runtime.live()),
            "retiring_end": len(rec.runtime.retiring),
            "connection_refs_end": len(rec.runtime.connection_refs()),
            "upstream_connection_objects_end": count_instances(UpstreamConnection) - conns_before,
            "live_generation_objects_end": count_instances(LiveGeneration),
            "generation_objects_end": count_instances(Generation),
            "backoff_failures_end": reader.backoff.failures("up"),
            "cycles_run": rec.cycles,
            "gc_objects_end": len(gc.get_objects()),
        }
    result["open_connections_after_close"] = reader.open_connections()
    return result


# -- C. real stdio reconnect cycles -------------------------------------------------------------


async def bench_stdio_churn(cycles: int) -> dict[str, Any]:
    before = child_pids()
    bounds = Bounds(cooldown_s=0.0)
    backoff = Backoff(cooldown_s=0.0, base_s=0.0, cap_s=0.0)
    spec = SourceSpec(name="up", transport=stdio_transport("--tools", ",".join(tool_names("io"))))
    max_children = 0
    series: list[tuple[int, int]] = []
    t_start = time.perf_counter()
    async with engine(spec, bounds, mode="legacy", backoff=backoff, health_interval_s=None) as (reader, rec, pubs):
        gen = await pubs.wait_for(ready_on_new_connection(None))
        conn = connection(gen)
        gc.collect()
        rss0 = rss_bytes()
        for i in range(1, cycles + 1):
            with contextlib.suppress(Exception):  # crash never answers: the call fails
                await gateway_call(rec, "crash", {})
            gen = await pubs.wait_for(ready_on_new_connection(conn))
            conn = connection(gen)
            max_children = max(max_children, len(child_pids() - before))
            if i % 10 == 0:
                gc.collect()
                series.append((i, rss_bytes()))
        elapsed = time.perf_counter() - t_start
        await quiescent(rec)
        children_inside = len(child_pids() - before)
        opened = reader.opened
    with contextlib.suppress(AssertionError):  # what is left after the bound is reported below
        await until(lambda: not child_pids() - before, what="the children reaped", timeout_s=5)
    leaked = child_pids() - before
    return {
        "cycles": cycles,
        "elapsed_s": elapsed,
        "s_per_cycle": elapsed / cycles,
        "rss_start": rss0,
        "rss_series": series,
        "connections_opened": opened,
        "max_children_during": max_children,
        "children_before_close": children_inside,
        "children_after_close": len(leaked),
    }


# -- main -------------------------------------------------------------------------------------------


def print_series(res: dict[str, Any]) -> None:
    print("    cycle   RSS")
    print(f"    {0:>5}   {fmt_bytes(res['rss_start'])}")
    for i, rss in res["rss_series"]:
        print(f"    {i:>5}   {fmt_bytes(rss)}")


async def amain(quick: bool) -> dict[str, Any]:
    fresh_samples = 10 if quick else FRESH_SAMPLES
    churn = 200 if quick else CHURN_CYCLES
    stdio_cycles = 5 if quick else STDIO_CYCLES
    out: dict[str, Any] = {"environment": environment()}
    t_all = time.perf_counter()

    print(f"A. list_changed -> published revision, {N_TOOLS}-tool upstream, Bounds(cooldown_s=0),")
    print(f"   {fresh_samples} samples each (after {FRESH_WARMUP} warm-up); times in ms")
    print("   list = one direct SDK Client listing every page; rtt = echo call on the gateway's connection;")
    print("   ovh = median - list median - rtt median; cyc = reconcile cycles per sample; gc2 = gen-2 collections")
    print("   in this process during samples (count, max ms); slow/gc = samples over 2x median / of those, with gc2")
    print(
        f"  {'transport/era':<22} {'protocol':<11} {'median':>7} {'p99':>7} {'list':>7} {'list99':>7} {'rtt':>6} "
        f"{'ovh':>6} {'cyc':>5} {'gc2':>3} {'max':>5} {'slow/gc':<5} target med<= {TARGET_MEDIAN_MS:g}"
    )
    out["freshness"] = await bench_freshness(fresh_samples)

    for mode in ("legacy", "auto"):
        print(
            f"\nB. in-process dying upstream ({N_TOOLS} tools), {churn} death->reconnect->re-list->publish cycles, "
            f"mode={mode}"
        )
        res = await bench_churn(churn, mode)
        out[f"churn_{mode}"] = res
        print(f"   protocol {res['protocol']}; {res['elapsed_s']:.1f} s, {res['ms_per_cycle']:.2f} ms/cycle")
        print_series(res)
        series = res["rss_series"]
        first = series[0][1]
        last = series[-1][1]
        growth = last - first
        res["rss_growth_first_sample_to_end"] = growth
        steps = [b - a for (_, a), (_, b) in itertools.pairwise(series)]
        print(
            f"   growth cycle {series[0][0]} -> {series[-1][0]}: {fmt_bytes(growth)} "
            f"({growth / max(1, series[-1][0] - series[0][0]):.0f} B/cycle); "
            f"median step {fmt_bytes(statistics.median(steps) if steps else 0)} per {CHURN_SAMPLE_EVERY} cycles"
        )
        print(
            f"   revisions published {res['revisions']}, connections opened {res['connections_opened']}, "
            f"cycles run {res['cycles_run']}"
        )
        print(
            f"   at end: open connections {res['open_connections_end']}, live generations "
            f"{res['live_generations_end']} (retiring {res['retiring_end']}), connection refs "
            f"{res['connection_refs_end']}; objects alive: UpstreamConnection (this run) "
            f"{res['upstream_connection_objects_end']}, LiveGeneration {res['live_generation_objects_end']}, "
            f"Generation {res['generation_objects_end']}; gc objects {res['gc_objects_end']:,}"
        )
        print(f"   after close: open connections {res['open_connections_after_close']}")
        print(f"   flat (growth < 1 MiB): {verdict(growth < 1024 * 1024)}")

    print(f"\nC. real stdio upstream crashing each cycle, {stdio_cycles} reconnect cycles (legacy)")
    res = await bench_stdio_churn(stdio_cycles)
    out["stdio_churn"] = res
    print(f"   {res['elapsed_s']:.1f} s, {res['s_per_cycle'] * 1000:.0f} ms/cycle (spawn + handshake + list)")
    print_series(res)
    print(
        f"   connections opened {res['connections_opened']}; child processes: max {res['max_children_during']} "
        f"during, {res['children_before_close']} before close, {res['children_after_close']} after close"
    )
    gc.collect()
    engines = len(out["freshness"]) + 3
    runtimes = out["runtime_objects_alive_at_exit"] = count_instances(Runtime)
    conns = out["upstream_connection_objects_alive_at_exit"] = count_instances(UpstreamConnection)
    print(
        f"\nafter all {engines} engines closed: Runtime objects still alive {runtimes}, UpstreamConnection {conns} "
        "(expected 0 and 0)"
    )
    out["total_s"] = time.perf_counter() - t_all
    print(f"\ntotal {out['total_s']:.1f} s")
    return out


def main() -> int:
    quick = "--quick" in sys.argv
    out = anyio.run(amain, quick)
    path = json_out_path(sys.argv)
    if path:
        dump_json(path, json.loads(json.dumps(out, default=str)))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
