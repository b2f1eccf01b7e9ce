"""Issue 26's scale goals for the data plane, measured: big lists, list_changed fan-out, idle sessions.

Run from the repo root:  python bench/bench_plane_goals.py [--quick | --smoke] [--only list,fanout,idle] [--json PATH]

Every gateway is a process of its own on 127.0.0.1 that binds port 0 and reports the port it got:
``mcp-reconciler serve`` (the "gateway" row; since issue 26's switch it is the gateway's own
plane, and the bench-only "new plane" row went with ``bench/plane_gateway.py``). Sources are
``tests.support.upstream_server`` over streamable HTTP. Clients speak raw HTTP (no SDK client),
so what is timed is the gateway.

1. ``list``: ``tools/list`` of 1,000 tools (one source of 993 + its 7 control tools) with 1,000
   2025-era sessions open: p50/p99 of the time from the request's first byte to the answer's
   last byte at a raw keep-alive client (``bench/_rawhttp.py``: ``Content-Length`` or the SSE
   stream's last chunk; what a gateway's latency is) over a sample spread across the sessions
   (first list per session, then a second pass), and one 2026-era (sessionless) pass; beside
   each, the gateway's CPU per list and that client's own JSON parse of the answer (after the
   clock stopped). In the same run the same client lists the upstream directly (the SDK server:
   the baseline, with the same-run ratio), and the older httpx rows stay (time to ``r.text``:
   httpx's own work on the answer included). Goal p50 <= 1 ms, p99 <= 5 ms.
2. ``fanout``: one ``notifications/tools/list_changed`` reaching N open sessions, both eras
   (2025: N standalone GET streams; 2026: N ``subscriptions/listen`` streams), held by two
   driver processes (this file with ``--driver``): raw sockets in one ``selectors`` loop each,
   timestamping (wall clock) the read that holds a session's frame — no HTTP client or SSE
   parsing, so the receivers' own CPU stays small beside the gateway's on the same cores. A
   round: the upstream's ``set_tools`` is called through the gateway (the upstream announces to
   the gateway, which re-lists and tells every session); per round, each session's arrival is
   measured from the trigger and from the round's first arrival (the fan-out itself, without
   the re-list), and the gateway's own write spread per notifier pass (first session told to
   the last, ``frontdoor.list_changed.fanout`` read from ``/metrics``). Goal p99 <= 20 ms.
3. ``idle``: N idle 2025-era sessions (initialize + initialized, then nothing): the gateway's RSS
   before, with N open, after they were reaped (``session_idle_s``), with N open again, and
   after reaping again — growth per session, what reaping gave back, and whether the second N
   reused the first N's memory. Goal <= 60 MB growth for 10,000, given back or reused.

``--quick`` runs smaller sizes; ``--smoke`` tiny ones (the test suite runs it so the bench
cannot rot). The box is shared: loadavg is printed with every figure. Benchmarks print; they
never assert (docs/DESIGN.md "Layout")."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

SELF = Path(__file__).resolve()
REPO_ROOT = SELF.parent.parent
sys.path.insert(0, str(SELF.parent))

import anyio  # noqa: E402
import httpx2  # noqa: E402
from _clients import INITIALIZE, INITIALIZED, cpu_s, list_once, loadavg, raw_session  # noqa: E402
from _ports import port_args, reported_port  # noqa: E402
from _rawhttp import RawHTTP, answer_of  # noqa: E402
from _stats import json_if_asked, pct  # noqa: E402
from anyio.streams.text import TextReceiveStream  # noqa: E402
from bench_dataplane import child  # noqa: E402

SMOKE = "--smoke" in sys.argv
QUICK = "--quick" in sys.argv
#: (sessions open, sessions sampled, tools) for ``list``; sessions and rounds for ``fanout``;
#: sessions and the idle timeout for ``idle``.
LIST = (6, 6, 30) if SMOKE else (300, 60, 1000) if QUICK else (1000, 200, 1000)
FANOUT = (4, 2) if SMOKE else (300, 8) if QUICK else (1000, 12)
IDLE = (20, 2.0) if SMOKE else (2000, 30.0) if QUICK else (10000, 90.0)
UPSTREAM = [sys.executable, "-m", "tests.support.upstream_server", "--transport", "http"]
CONTROL_TOOLS = 7  # the upstream's own control tools, listed beside the catalog
DRIVERS = 2
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
META_2026 = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
MIB = 1024 * 1024
LISTEN = "subscriptions/listen"


def gateways() -> list[str]:
    """The rows: ``serve``."""
    return ["gateway"]


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


@contextlib.asynccontextmanager
async def process(argv: list[str], port_file: Path) -> AsyncIterator[tuple[int, int]]:
    """``argv`` (told to bind port 0 and report it in ``port_file``) running; yields (pid, port)."""
    async with child(argv) as proc:
        yield proc.pid, await reported_port(port_file, lambda: proc.returncode)


@contextlib.asynccontextmanager
async def gateway(
    tmp: Path, row: str, upstream_args: list[str], limits: dict[str, Any], policy: str = "current"
) -> AsyncIterator[Any]:
    """An upstream and the ``row`` gateway in front of it (source ``h``, anonymous access with
    ``policy``, ``limits`` as ``gateway.limits``, no reconcile cooldown); yields (gateway pid,
    /mcp URL, an HTTP client)."""
    async with contextlib.AsyncExitStack() as stack:
        up_file, gw_file = tmp / f"{row}-up.port", tmp / f"{row}-gw.port"
        _, up_port = await stack.enter_async_context(process([*UPSTREAM, *port_args(up_file), *upstream_args], up_file))
        cfg = tmp / f"{row}.yaml"
        gateway_cfg = {"anonymous": {"grant_policy": policy}, "cooldown_s": 0, "limits": limits}
        source = {"name": "h", "http": {"url": f"http://127.0.0.1:{up_port}/mcp"}}
        cfg.write_text(json.dumps({"gateway": gateway_cfg, "sources": [source]}))
        argv = [sys.executable, "-m", "mcp_reconciler.api.cli", "serve", "--config", str(cfg), *port_args(gw_file)]
        pid, port = await stack.enter_async_context(process(argv, gw_file))
        limits_http = httpx2.Limits(max_connections=64, max_keepalive_connections=64)
        http = await stack.enter_async_context(httpx2.AsyncClient(timeout=60, limits=limits_http))
        url = f"http://127.0.0.1:{port}/mcp"
        with anyio.fail_after(60):  # the source is published
            while True:
                with contextlib.suppress(httpx2.HTTPError, KeyError):
                    if (await list_once(http, url, await raw_session(http, url), 0))[1] > CONTROL_TOOLS:
                        break
                await anyio.sleep(0.2)  # waiting on another process: bounded polling
        yield pid, url, http


async def open_sessions(http: httpx2.AsyncClient, url: str, n: int, width: int = 32) -> list[str]:
    sids: list[str] = []
    claimed = 0

    async def worker() -> None:
        nonlocal claimed
        while claimed < n:
            claimed += 1
            sids.append(await raw_session(http, url))

    async with anyio.create_task_group() as tg:
        for _ in range(min(width, n)):
            tg.start_soon(worker)
    return sids


# -- 1. tools/list at 1,000 sessions ---------------------------------------------------------------


async def list_2026(http: httpx2.AsyncClient, url: str, i: int) -> tuple[float, int]:
    headers = {**HEADERS, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list"}
    body = {"jsonrpc": "2.0", "id": i, "method": "tools/list", "params": {"_meta": META_2026}}
    s = time.perf_counter()
    r = await http.post(url, json=body, headers=headers)
    text = r.text
    return (time.perf_counter() - s) * 1000, text.count('"inputSchema"')


def raw_list(conn: RawHTTP, path: str, era: str, i: int, sid: str | None) -> tuple[float, float, int]:
    """One ``tools/list`` on the raw keep-alive connection ``conn``: (ms to the answer's last
    byte, ms the client then spends parsing it, tools listed). ``era`` "2025" names the session
    ``sid``; "2026" is sessionless."""
    if era == "2025":
        headers = {**HEADERS, "mcp-session-id": sid or "", "mcp-protocol-version": "2025-11-25"}
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": i, "method": "tools/list"}
    else:
        headers = {**HEADERS, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list"}
        body = {"jsonrpc": "2.0", "id": i, "method": "tools/list", "params": {"_meta": META_2026}}
    answer = conn.post(path, headers, json.dumps(body).encode())
    p0 = time.perf_counter()
    message = answer_of(answer)
    parse = (time.perf_counter() - p0) * 1000
    if answer.status != 200 or "result" not in message:
        raise RuntimeError(f"tools/list {era}: {answer.status} {str(message)[:200]}")
    return answer.seconds * 1000, parse, len(message["result"]["tools"])


def raw_session_on(conn: RawHTTP, path: str) -> str:
    """A 2025-era session opened on ``conn`` (initialize + initialized): its id."""
    sid = conn.post(path, HEADERS, json.dumps(INITIALIZE).encode()).headers["mcp-session-id"]
    conn.post(
        path, {**HEADERS, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}, json.dumps(INITIALIZED).encode()
    )
    return sid


async def bench_list(tmp: Path, row: str) -> dict[str, Any]:
    """The rows (all printed): the gateway timed by a raw keep-alive client to the answer's last
    byte (first list per 2025 session, a second pass, 2026 sessionless), the client's own parse
    of each answer beside it; the same upstream listed directly by the same client in the same
    run (the SDK server: the baseline); and the older httpx rows (time to ``r.text``, which
    includes httpx's own work on the 118 KB answer)."""
    n_sessions, n_sample, n_tools = LIST
    names = tmp / "tools.json"
    names.write_text(json.dumps([f"t{i:04d}" for i in range(n_tools - CONTROL_TOOLS)]))
    limits = {"transport_sessions": n_sessions + 100, "transport_sessions_per_client": n_sessions + 100}
    async with gateway(tmp, f"list-{row}", ["--tools-file", str(names), "--page-size", "5000"], limits) as (
        pid,
        url,
        http,
    ):
        sids = await open_sessions(http, url, n_sessions)
        sample = sids[:: max(1, len(sids) // n_sample)][:n_sample]
        out: dict[str, Any] = {"sessions_open": len(sids), "tools": n_tools}
        print(f"\n[list {row}] tools/list of {n_tools} tools, {len(sids)} sessions open, {len(sample)} sampled")
        print("  time to the answer's last byte at a raw keep-alive client; 'parse': that client's JSON parse after it")
        host, port = url.split("//")[1].split("/")[0].split(":")
        up_port = int((tmp / f"list-{row}-up.port").read_text())
        gw = RawHTTP(host, int(port))
        direct = RawHTTP("127.0.0.1", up_port)
        try:
            up_sid = raw_session_on(direct, "/mcp")
            passes: list[tuple[str, Any, int | None]] = [
                ("2025 first list per session", lambda i, sid: raw_list(gw, "/mcp", "2025", i, sid), pid),
                ("2025 second pass", lambda i, sid: raw_list(gw, "/mcp", "2025", i, sid), pid),
                ("2026 sessionless", lambda i, sid: raw_list(gw, "/mcp", "2026", i, None), pid),
                ("direct upstream 2025", lambda i, sid: raw_list(direct, "/mcp", "2025", i, up_sid), None),
                ("direct upstream 2026", lambda i, sid: raw_list(direct, "/mcp", "2026", i, None), None),
                ("httpx 2025 second pass", None, pid),
                ("httpx 2026 sessionless", None, pid),
            ]
            for phase, call, target in passes:
                lat, parse, c0, b0 = [], [], cpu_s(pid), time.process_time()
                try:
                    for i, sid in enumerate(sample):
                        if call is not None:
                            dt, pt, n = call(i + 2, sid)
                            parse.append(pt)
                        elif phase.startswith("httpx 2025"):
                            dt, n = await list_once(http, url, sid, i + 2, parse=False)
                        else:
                            dt, n = await list_2026(http, url, i + 2)
                        if n != n_tools:
                            raise RuntimeError(f"{phase}: listed {n} tools, not {n_tools}")
                        lat.append(dt)
                except (RuntimeError, KeyError, ValueError) as exc:  # a baseline the upstream cannot serve
                    print(f"  {phase:28} not measured: {exc}")
                    continue
                cpu = (cpu_s(pid) - c0) * 1000 / len(sample)
                client = (time.process_time() - b0) * 1000 / len(sample)  # this process: the receiving side
                p50, p99 = pct(lat, 50), pct(lat, 99)
                verdict = (
                    f"[{'MET' if p50 <= 1 and p99 <= 5 else 'not met'}] (goal p50 <= 1, p99 <= 5)"
                    if target is not None
                    else "[baseline: the SDK server listing the same tools]"
                )
                gw_cpu = f"gw CPU/list {cpu:6.2f} ms" if target is not None else f"{'':22}"
                parsed = f"parse p50 {pct(parse, 50):5.2f} ms" if parse else "parse   n/a   "
                print(
                    f"  {phase:28} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  {gw_cpu}  {parsed}  "
                    f"client CPU/list {client:6.2f} ms  {verdict}  loadavg {loadavg()}"
                )
                out[phase] = {
                    "p50_ms": p50,
                    "p99_ms": p99,
                    "gw_cpu_ms": cpu if target is not None else None,
                    "parse_p50_ms": pct(parse, 50) if parse else None,
                    "client_cpu_ms": client,
                    "loadavg": loadavg(),
                }
        finally:
            gw.close()
            direct.close()
        for era, phase in (("2025", "2025 second pass"), ("2026", "2026 sessionless")):
            if phase in out and f"direct upstream {era}" in out:
                ratio = out[phase]["p50_ms"] / out[f"direct upstream {era}"]["p50_ms"]
                out[f"p50 gateway/direct {era}"] = ratio
                print(f"  {era}: gateway p50 / direct upstream p50 (same run) {ratio:.2f}x")
        return out


# -- 2. list_changed fan-out -----------------------------------------------------------------------


async def _driver(url: str, era: str, n: int) -> None:
    """Hold ``n`` sessions of ``era`` listening for ``tools/list_changed`` on raw sockets; print
    ``ready``, then one line per round once each of its sessions saw that round: the wall-clock
    time each session's frame arrived (until stdin closes).

    The receiving side is kept as cheap as a client can be, so the spread measures the gateway
    and not the drivers: the sessions are opened with raw HTTP, then each stream is a plain
    socket in one ``selectors`` loop that reads bytes and timestamps a read holding the
    notification (no HTTP client, no SSE or JSON parsing on the hot path; the spread used to
    include an SDK-style client's 80 ms of CPU per round on the same 2 cores)."""
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    path = "/" + url.split("//", 1)[1].split("/", 1)[1]
    socks: list[socket.socket] = []
    if era == "2025":
        limits = httpx2.Limits(max_connections=32, max_keepalive_connections=32)
        async with httpx2.AsyncClient(timeout=60, limits=limits) as http:
            sids = await open_sessions(http, url, n)
        for sid in sids:
            head = (
                f"GET {path} HTTP/1.1\r\nhost: {host}:{port}\r\naccept: text/event-stream\r\n"
                f"mcp-session-id: {sid}\r\nmcp-protocol-version: 2025-11-25\r\n\r\n"
            )
            socks.append(_open_stream(host, int(port), head.encode(), b"\r\n\r\n"))
    else:
        for i in range(n):
            params = {"notifications": {"toolsListChanged": True}, "_meta": META_2026}
            body = json.dumps({"jsonrpc": "2.0", "id": f"listen-{i}", "method": LISTEN, "params": params}).encode()
            head = (
                f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\naccept: application/json, text/event-stream\r\n"
                f"content-type: application/json\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: {LISTEN}\r\n"
                f"content-length: {len(body)}\r\n\r\n"
            )
            socks.append(
                _open_stream(host, int(port), head.encode() + body, b"notifications/subscriptions/acknowledged")
            )
    _emit({"ready": n})
    _receive(socks)


def _open_stream(host: str, port: int, request: bytes, until: bytes) -> socket.socket:
    """A socket with ``request`` sent and its answer read up to ``until`` (blocking, one at a time)."""
    sock = socket.create_connection((host, port))
    sock.sendall(request)
    got = b""
    while until not in got:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError(f"the gateway closed the stream: {got[:300]!r}")
        got += chunk
    if b" 200 " not in got.split(b"\r\n", 1)[0]:
        raise RuntimeError(f"the gateway refused the stream: {got[:300]!r}")
    sock.setblocking(False)
    return sock


def _receive(socks: list[socket.socket]) -> None:
    """The selectors loop: each read that holds ``list_changed`` is an arrival of that session's
    next round, timestamped right after the read; a round is reported once every session saw it."""
    marker = b"notifications/tools/list_changed"
    keep = len(marker) - 1  # a read may split the marker: carry this much of the last one over
    sel = selectors.DefaultSelector()
    for i, sock in enumerate(socks):
        sel.register(sock, selectors.EVENT_READ, i)
    sel.register(sys.stdin, selectors.EVENT_READ, -1)
    tails = [b""] * len(socks)
    seen = [0] * len(socks)
    rounds: dict[int, list[float]] = {}
    while True:
        for key, _ in sel.select():
            i = key.data
            if i < 0:
                if not sys.stdin.buffer.read1(4096):  # closed: stop
                    return
                continue
            data = key.fileobj.recv(65536)  # type: ignore[union-attr]
            t = time.time()
            if not data:
                raise RuntimeError(f"the gateway ended stream {i}")
            buf = tails[i] + data
            for _ in range(buf.count(marker)):
                times = rounds.setdefault(seen[i], [])
                times.append(t)
                if len(times) == len(socks):
                    _emit({"round": seen[i], "times": rounds.pop(seen[i])})
                seen[i] += 1
            tails[i] = buf[-keep:]


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Driver:
    """One driver process; :attr:`arrivals` holds ``round -> [times]`` as they are reported."""

    def __init__(self, url: str, era: str, n: int) -> None:
        self.argv = [sys.executable, str(SELF), "--driver", url, era, str(n)]
        self.n = n
        self.arrivals: dict[int, list[float]] = {}
        self.ready = anyio.Event()
        self.news = anyio.Event()
        self.pid = 0

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        async with await anyio.open_process(self.argv, cwd=REPO_ROOT, stderr=None) as proc:
            assert proc.stdout is not None and proc.stdin is not None
            self.pid = proc.pid
            task_status.started()
            buffer = ""
            try:
                async for chunk in TextReceiveStream(proc.stdout):
                    *lines, buffer = (buffer + chunk).split("\n")
                    for line in lines:
                        msg = json.loads(line)
                        if "ready" in msg:
                            self.ready.set()
                        else:
                            self.arrivals[msg["round"]] = msg["times"]
                            self.news.set()
                            self.news = anyio.Event()
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    await proc.stdin.aclose()
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()

    async def round_done(self, k: int) -> list[float]:
        while len(self.arrivals.get(k, [])) < self.n:
            await self.news.wait()
        return self.arrivals[k]


async def fanout_written(http: httpx2.AsyncClient, url: str) -> tuple[float, int] | None:
    """The gateway's own write spreads so far (``frontdoor.list_changed.fanout``: per notifier
    pass, first session told to last) as (sum s, passes), from ``/metrics``; ``None`` when the
    gateway does not measure it."""
    r = await http.get(url.rsplit("/", 1)[0] + "/metrics", headers={"authorization": "Bearer bench-operator"})
    got: dict[str, float] = {}
    for line in r.text.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith("mcp_reconciler_frontdoor_list_changed_fanout_seconds_"):
            got[name.rsplit("_", 1)[1]] = float(value)
    return (got["sum"], int(got["count"])) if {"sum", "count"} <= got.keys() else None


async def bench_fanout(tmp: Path, row: str) -> dict[str, Any]:
    n, rounds = FANOUT
    limits = {"transport_sessions": n + 100, "transport_sessions_per_client": n + 100, "connections": 2 * n + 256}
    out: dict[str, Any] = {}
    # ``follow``: a new upstream tool changes every session's view, so every session is told.
    async with gateway(tmp, f"fanout-{row}", ["--tools", "echo"], limits, "follow") as (pid, url, http):
        sid = await raw_session(http, url)
        trigger_headers = {**HEADERS, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
        for era in ("2025", "2026"):
            drivers = [Driver(url, era, n // DRIVERS + (i < n % DRIVERS)) for i in range(DRIVERS)]
            from_trigger: list[float] = []
            spread: list[float] = []
            written0: tuple[float, int] | None = None
            gw_cpu: list[float] = []  # the gateway's CPU per round: re-list, publication, N writes
            drv_cpu: list[float] = []  # the receiving drivers' CPU per round (same cores)
            async with anyio.create_task_group() as tg:
                for d in drivers:
                    await tg.start(d.run)
                with anyio.fail_after(300):
                    for d in drivers:
                        await d.ready.wait()
                for k in range(rounds + 1):  # round 0 warms up
                    names = ["echo", f"r{era}x{k}"]
                    call = {"name": "h__set_tools", "arguments": {"names": names}}
                    body = {"jsonrpc": "2.0", "id": k + 10, "method": "tools/call", "params": call}
                    sent, c0 = time.time(), cpu_s(pid)
                    d0 = sum(cpu_s(d.pid) for d in drivers)
                    (await http.post(url, json=body, headers=trigger_headers)).raise_for_status()
                    with anyio.fail_after(60):
                        times = [t for d in drivers for t in await d.round_done(k)]
                    if k == 0:
                        written0 = await fanout_written(http, url)
                    if k:
                        gw_cpu.append((cpu_s(pid) - c0) * 1000)
                        drv_cpu.append((sum(cpu_s(d.pid) for d in drivers) - d0) * 1000)
                        from_trigger += [(t - sent) * 1000 for t in times]
                        spread += [(t - min(times)) * 1000 for t in times]
                tg.cancel_scope.cancel()
            written1 = await fanout_written(http, url)
            write_spread = (
                (written1[0] - written0[0]) * 1000 / max(written1[1] - written0[1], 1)
                if written0 is not None and written1 is not None
                else None
            )
            p99 = pct(spread, 99)
            verdict = "MET" if p99 <= 20 else "not met"
            print(
                f"\n[fanout {row}] {era} era: one tools/list_changed to {n} sessions, {rounds} rounds, "
                f"loadavg {loadavg()}\n"
                f"  from the trigger (re-list included)   p50 {pct(from_trigger, 50):7.2f} ms  "
                f"p99 {pct(from_trigger, 99):7.2f} ms\n"
                f"  after the round's first arrival       p50 {pct(spread, 50):7.2f} ms  "
                f"p99 {p99:7.2f} ms  [{verdict}] (goal p99 <= 20)\n"
                f"  gateway CPU per round {sum(gw_cpu) / len(gw_cpu):7.1f} ms mean; the {DRIVERS} receiving"
                f" drivers' {sum(drv_cpu) / len(drv_cpu):7.1f} ms (raw sockets; same 2 cores)\n"
                f"  gateway-side write spread (first to last session told, per notifier pass) "
                + (f"{write_spread:7.2f} ms mean" if write_spread is not None else "not measured by this gateway")
            )
            out[era] = {
                "sessions": n,
                "rounds": rounds,
                "from_trigger_p50_ms": pct(from_trigger, 50),
                "from_trigger_p99_ms": pct(from_trigger, 99),
                "fanout_p50_ms": pct(spread, 50),
                "fanout_p99_ms": p99,
                "gw_cpu_ms_per_round": sum(gw_cpu) / len(gw_cpu),
                "drivers_cpu_ms_per_round": sum(drv_cpu) / len(drv_cpu),
                "gw_write_spread_ms": write_spread,
                "loadavg": loadavg(),
            }
    return out


# -- 3. idle 2025-era sessions ----------------------------------------------------------------------


async def alive(http: httpx2.AsyncClient, url: str, sid: str) -> bool:
    headers = {**HEADERS, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
    r = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers)
    return r.status_code == 200


async def reaped(
    http: httpx2.AsyncClient, url: str, sids: list[str], idle_s: float, last_touch: float
) -> tuple[int, int]:
    """Wait out the idle timeout after the last request on ``sids`` (plus the reaper's period),
    then until the reaper is through: fresh sessions are probed (a request on a reaped session
    is 404; one still open is touched by the probe, so none is probed twice) until 20 in a row
    are gone, bounded. Returns (gone, probed)."""
    await anyio.sleep(max(0.0, last_touch + idle_s + 1.5 - time.monotonic()))  # the gateway's clock, not an event
    order = sids[:: max(1, len(sids) // 400)]  # spread over the opening order
    gone = probed = streak = 0
    deadline = time.monotonic() + 30 + len(sids) / 50  # closing N sessions takes a while under load
    for sid in order:
        probed += 1
        if await alive(http, url, sid):
            streak = 0
            if time.monotonic() > deadline:
                break
            await anyio.sleep(0.5)  # the reaper is still closing sessions
        else:
            gone, streak = gone + 1, streak + 1
            if streak >= 20:
                break
    return gone, probed


async def bench_idle(tmp: Path, row: str) -> dict[str, Any]:
    n, idle_s = IDLE
    limits = {"transport_sessions": n + 100, "transport_sessions_per_client": n + 100, "session_idle_s": idle_s}
    async with gateway(tmp, f"idle-{row}", ["--tools", "echo"], limits) as (pid, url, http):
        await open_sessions(http, url, min(n, 50))  # warm: first-use allocations are not per session
        marks = [("start", rss(pid))]
        figures: dict[str, Any] = {}
        for cycle in (1, 2):
            t0 = time.monotonic()
            sids = await open_sessions(http, url, n)
            opened_s = time.monotonic() - t0
            marks.append((f"{n} open ({cycle})", rss(pid)))
            still = sum([await alive(http, url, s) for s in (sids[0], sids[-1])])
            gone, sampled = await reaped(http, url, sids, idle_s, time.monotonic())
            marks.append((f"reaped ({cycle})", rss(pid)))
            figures[f"cycle{cycle}"] = {
                "opened_s": opened_s,
                "oldest_and_newest_open": still,
                "reaped_sample": [gone, sampled],
            }
        base = marks[0][1]
        print(f"\n[idle {row}] {n} idle 2025-era sessions, session_idle_s {idle_s}, loadavg {loadavg()}")
        for label, value in marks:
            print(f"  RSS {label:18} {value / MIB:8.1f} MiB  ({(value - base) / MIB:+7.1f} MiB)")
        growth = (marks[1][1] - base) / MIB
        regrowth = (marks[3][1] - marks[2][1]) / MIB
        verdict = "MET" if growth * 10000 / n <= 60 else "not met"
        print(
            f"  growth for {n}: {growth:.1f} MiB ({growth * 1024 * 1024 / n / 1024:.1f} KiB/session, "
            f"{growth * 10000 / n:.1f} MiB per 10,000) [{verdict}] (goal <= 60 MB per 10,000); "
            f"given back after reaping {(marks[1][1] - marks[2][1]) / MIB:.1f} MiB; "
            f"second {n} grew {regrowth:+.1f} MiB (reused: {'yes' if regrowth <= 0.25 * max(growth, 1) else 'no'}); "
            f"open at peak {figures['cycle1']['oldest_and_newest_open']}/2, reaped "
            f"{figures['cycle1']['reaped_sample'][0]}/{figures['cycle1']['reaped_sample'][1]} probed; "
            f"opened in {figures['cycle1']['opened_s']:.0f} / {figures['cycle2']['opened_s']:.0f} s"
        )
        if figures["cycle1"]["oldest_and_newest_open"] < 2:  # the machine was too slow for idle_s: say so
            print(f"  the oldest sessions were reaped before all {n} were open: the growth above is understated")
        figures |= {"rss_mib": {k: v / MIB for k, v in marks}, "growth_mib": growth, "regrowth_mib": regrowth}
        figures["loadavg"] = loadavg()
        return figures


async def amain(only: set[str]) -> dict[str, Any]:
    parts = {"list": bench_list, "fanout": bench_fanout, "idle": bench_idle}
    out: dict[str, Any] = {}
    print(f"bench_plane_goals: {os.cpu_count()} CPUs, python {sys.version.split()[0]}, loadavg {loadavg()}")
    with tempfile.TemporaryDirectory(prefix="bench-plane-goals-") as d:
        for name, fn in parts.items():
            if name in only:
                for row in gateways():
                    out[f"{name} {row}"] = await fn(Path(d), row)
    return {"loadavg_end": loadavg(), **out}


def main() -> int:
    if "--driver" in sys.argv:
        i = sys.argv.index("--driver")
        anyio.run(_driver, sys.argv[i + 1], sys.argv[i + 2], int(sys.argv[i + 3]))
        return 0
    only = {"list", "fanout", "idle"}
    if "--only" in sys.argv:
        only = set(sys.argv[sys.argv.index("--only") + 1].split(","))
    json_if_asked(sys.argv, anyio.run(amain, only))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
