"""Resource-update fan-out: 200 sessions subscribed to the same resource, one upstream update —
how long until all 200 have it (issue 11: "within 50 ms").

Run from the repo root:  python bench/bench_subscriptions.py [--quick] [--sessions N] [--json PATH]

Set-up. The gateway runs in this process (``api.server.serve_http`` on 127.0.0.1, ephemeral port)
on one stdio source, ``tests.support.resource_server`` — a 2026-07-28 upstream (listen streams)
or, with ``--legacy-only``, a 2025-11-25 one (``resources/subscribe``, pushed updates). N
sessions (session tokens from the engine's authority) are N downstream clients over streamable
HTTP, spread over two *driver* processes (this script with ``--driver``) so that the clients' own
work runs beside the gateway rather than in it. Every client subscribes to ``note://a`` the way
its era does (2025-11-25: ``resources/subscribe``, pushes on its GET stream; 2026-07-28: a
``subscriptions/listen`` stream with ``resource_subscriptions``): one upstream subscription serves
all N. Downstream ``raw`` rows are 2025-11-25 sessions spoken over plain HTTP (initialize,
subscribe, a GET stream read line by line): they measure the gateway; ``legacy`` and ``auto``
rows use SDK clients, whose own receiving (parsing, validation) on the same two cores is part of
their figure.

A round: this process calls the upstream's ``touch`` tool (through the gateway), which records the
wall-clock time just before the upstream sends ``notifications/resources/updated`` and answers it;
each driver timestamps (wall clock) every client's receipt and reports once all its clients have
the round's update. The round's figure is the *last* receipt minus the send time: how long until
all N sessions had it. Rounds after warm-up are summarized as p50 / p99 / max (with fewer than 100
rounds p99 is the maximum), beside the median per-session latency and the CPU this process (the
gateway, mostly) spent per round. Configurations (downstream, upstream): raw with a 2026
upstream, raw with a 2025 upstream, SDK legacy clients with a 2026 upstream, SDK 2026-07-28
clients with a 2026 upstream. Target: all N within 50 ms (judged on p50; p99 and max shown as
measured).

Benchmarks print figures; they never assert (docs/DESIGN.md "Layout")."""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import sys
import tempfile
import time
import warnings
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

SELF = Path(__file__).resolve()
BENCH_DIR = SELF.parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(BENCH_DIR))

import anyio  # noqa: E402
import httpx2  # noqa: E402
import mcp_types as types  # noqa: E402
from _stats import dump_json, environment, median, pct, verdict  # noqa: E402
from anyio.streams.text import TextReceiveStream  # noqa: E402
from mcp import Client, MCPDeprecationWarning  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from mcp_reconciler.sdk.http_client import mcp_http_client  # noqa: E402
from tests.support.raw_mcp import legacy_headers, legacy_open  # noqa: E402

URI = "note://a"
TARGET_MS = 50.0
DRIVERS = 2
#: (downstream, upstream). Downstream ``raw``: 2025-11-25 sessions spoken over plain HTTP by the
#: driver (no SDK client parsing on the receiving side); ``raw26``: 2026-07-28 listen streams spoken
#: over plain HTTP; ``legacy``/``auto``: SDK clients.
CONFIGS = [("raw", "modern"), ("raw", "legacy"), ("raw26", "modern"), ("legacy", "modern"), ("auto", "modern")]


# -- driver (a separate process holding some of the clients) --------------------------------------


async def _driver(url: str, mode: str, tokens: list[str]) -> None:
    """Open one client per token, subscribe each, report ``ready``; then report every round once
    all of this driver's clients have its update: ``{"round": k, "times": [...]}``."""
    received: list[list[float]] = [[] for _ in tokens]
    changed = anyio.Event()

    def handler(i: int) -> Any:
        async def on_message(message: Any) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                received[i].append(time.time())
                changed.set()

        return on_message

    async def session(i: int, token: str, ready: anyio.Event, stop: anyio.Event) -> None:
        async with mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
            for _attempt in range(5):
                target = streamable_http_client(url, http_client=http)
                async with Client(target, mode=mode, message_handler=handler(i)) as client:
                    if mode != "legacy" and client.protocol_version.startswith("2025"):
                        # The discovery probe failed under the connection burst and the SDK fell
                        # back to 2025-11-25: open this client again.
                        continue
                    await subscribe_until(client, ready, stop)
                    return
                await anyio.sleep(0.2)  # a retry's pace after the connection burst (bounded: 5 attempts)
            raise RuntimeError("a client could not negotiate 2026-07-28")

    async def subscribe_until(client: Client, ready: anyio.Event, stop: anyio.Event) -> None:
        if mode == "legacy":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.session.subscribe_resource(URI)
            ready.set()
            await stop.wait()
            return
        async with client.listen(resource_subscriptions=[URI]) as sub:
            ready.set()
            async with anyio.create_task_group() as tg:

                async def drain() -> None:
                    async for _event in sub:
                        pass  # the message handler has it (the SDK tees events)

                tg.start_soon(drain)
                await stop.wait()
                tg.cancel_scope.cancel()

    async def raw_session(i: int, token: str, http: Any, ready: anyio.Event, stop: anyio.Event) -> None:
        """A 2025-11-25 session spoken over plain HTTP (no SDK client): initialize, subscribe, and
        a GET stream read line by line. What it measures is the gateway, not a client's parsing."""
        base = {"Authorization": f"Bearer {token}"}
        sid = (await legacy_open(http, url, base)).headers["mcp-session-id"]
        headers = legacy_headers(sid, base)
        get_headers = legacy_headers(sid, {**base, "Accept": "text/event-stream"})
        async with http.stream("GET", url, headers=get_headers) as stream:
            subscribe = {"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {"uri": URI}}
            (await http.post(url, json=subscribe, headers=headers)).raise_for_status()
            ready.set()
            async with anyio.create_task_group() as tg:

                async def read() -> None:
                    async for line in stream.aiter_lines():
                        if line.startswith("data:") and "notifications/resources/updated" in line:
                            received[i].append(time.time())
                            changed.set()

                tg.start_soon(read)
                await stop.wait()
                tg.cancel_scope.cancel()
        await http.delete(url, headers=headers)

    async def raw_listen(i: int, token: str, http: Any, ready: anyio.Event, stop: anyio.Event) -> None:
        """A 2026-07-28 ``subscriptions/listen`` stream spoken over plain HTTP (no SDK client): one
        POST whose SSE response is read line by line — the new era's counterpart of ``raw``."""
        headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": "subscriptions/listen",
        }
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        params = {"notifications": {"resourceSubscriptions": [URI]}, "_meta": meta}
        listen = {"jsonrpc": "2.0", "id": f"listen-{i}", "method": "subscriptions/listen", "params": params}
        async with http.stream("POST", url, json=listen, headers=headers) as stream:
            async with anyio.create_task_group() as tg:

                async def read() -> None:
                    async for line in stream.aiter_lines():
                        if line.startswith("data:") and "notifications/subscriptions/acknowledged" in line:
                            ready.set()
                        elif line.startswith("data:") and "notifications/resources/updated" in line:
                            received[i].append(time.time())
                            changed.set()

                tg.start_soon(read)
                await stop.wait()
                tg.cancel_scope.cancel()

    async def until_stdin_closes(scope: anyio.CancelScope) -> None:
        await anyio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)  # closed by the benchmark: stop
        stop.set()
        await anyio.sleep(5)  # the sessions close their clients; then the rest ends
        scope.cancel()

    stop = anyio.Event()
    async with AsyncExitStack() as stack, anyio.create_task_group() as tg:
        tg.start_soon(until_stdin_closes, tg.cancel_scope)
        readies = []
        limits = httpx2.Limits(max_connections=4 * len(tokens), max_keepalive_connections=2 * len(tokens))
        raw_http = await stack.enter_async_context(httpx2.AsyncClient(timeout=60, limits=limits))
        for i, token in enumerate(tokens):
            ready = anyio.Event()
            readies.append(ready)
            if mode == "raw":
                tg.start_soon(raw_session, i, token, raw_http, ready, stop)
            elif mode == "raw26":
                tg.start_soon(raw_listen, i, token, raw_http, ready, stop)
            else:
                tg.start_soon(session, i, token, ready, stop)
            if i % 10 == 9:
                await anyio.sleep(0.1)  # opening 100 clients at once only measures the accept queue
        for ready in readies:
            await ready.wait()
        _emit({"ready": len(tokens)})
        reported = 0
        while not stop.is_set():
            await changed.wait()
            changed = anyio.Event()
            done = min(len(r) for r in received)
            while reported < done:
                _emit({"round": reported, "times": [r[reported] for r in received], "cpu": time.process_time()})
                reported += 1


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


# -- the benchmark ----------------------------------------------------------------------------------


class Driver:
    """One driver process holding some of the clients; :meth:`read` collects its reports."""

    def __init__(self, url: str, mode: str, tokens: list[str], tmp: Path) -> None:
        self.token_file = tmp / f"tokens-{id(self)}.json"
        self.token_file.write_text(json.dumps(tokens))
        self.argv = [sys.executable, str(SELF), "--driver", url, mode, str(self.token_file)]
        self.rounds: dict[int, list[float]] = {}
        self.cpu: dict[int, float] = {}  # the driver's process CPU time when it reported round k
        self.ready = anyio.Event()
        self.news = anyio.Event()

    async def read(self) -> None:
        async with await anyio.open_process(self.argv, cwd=REPO_ROOT, stderr=None) as proc:
            assert proc.stdout is not None
            buffer = ""
            try:
                async for chunk in TextReceiveStream(proc.stdout):
                    buffer += chunk
                    *lines, buffer = buffer.split("\n")
                    for line in lines:
                        msg = json.loads(line)
                        if "ready" in msg:
                            self.ready.set()
                        else:
                            self.rounds[msg["round"]] = msg["times"]
                            self.cpu[msg["round"]] = msg["cpu"]
                            self.news.set()
                            self.news = anyio.Event()
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(15):
                    if proc.stdin is not None:
                        await proc.stdin.aclose()  # the driver closes its clients and exits
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()

    async def wait_round(self, k: int) -> list[float]:
        while k not in self.rounds:
            await self.news.wait()
        return self.rounds[k]


async def run_config(
    down: str, up: str, sessions: int, rounds: int, warmup: int, profile: str | None = None
) -> dict[str, Any]:
    from mcp_reconciler.api.server import serve_http

    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        args = ["-m", "tests.support.resource_server"] + (["--legacy-only"] if up == "legacy" else [])
        cfg = tmp / "gateway.yaml"
        src = {"name": "res", "stdio": {"command": "python", "args": args, "cwd": str(REPO_ROOT)}}
        cfg.write_text(json.dumps({"gateway": {"cooldown_s": 0.05}, "sources": [src]}))
        async with serve_http(cfg, port=0) as served:
            engine = served.gateway.engine
            live = engine.current
            assert live is not None
            tokens = [engine.sessions.create(f"bench{i}", live.generation).token for i in range(sessions + 1)]
            per = [tokens[1 + i :: DRIVERS] for i in range(DRIVERS)]
            drivers = [Driver(served.url, down, chunk, tmp) for chunk in per]
            async with anyio.create_task_group() as tg:
                for d in drivers:
                    tg.start_soon(d.read)
                with anyio.fail_after(120):
                    for d in drivers:
                        await d.ready.wait()
                trigger_headers = {"Authorization": f"Bearer {tokens[0]}"}
                async with mcp_http_client(headers=trigger_headers) as http:
                    async with Client(streamable_http_client(served.url, http_client=http), mode="legacy") as trig:
                        held = served.front.subscriptions.upstream.refs(("res", URI))
                        alls: list[float] = []
                        per_session: list[float] = []
                        cpu: list[float] = []
                        profiler = cProfile.Profile() if profile else None
                        for k in range(warmup + rounds):
                            if profiler is not None and k == warmup:
                                profiler.enable()
                            c0 = time.process_time()
                            out = await trig.call_tool("res__touch", {"uri": URI})
                            sent_at = json.loads(out.content[0].text)["sent_at"]  # type: ignore[union-attr]
                            with anyio.fail_after(30):
                                times = [t for d in drivers for t in await d.wait_round(k)]
                            if k >= warmup:
                                cpu.append((time.process_time() - c0) * 1000)
                                alls.append((max(times) - sent_at) * 1000)
                                per_session.extend((t - sent_at) * 1000 for t in times)
                            await anyio.sleep(0.05)  # rounds do not overlap
                        if profiler is not None and profile is not None:
                            profiler.disable()
                            profiler.dump_stats(profile)
                tg.cancel_scope.cancel()
    client_cpu = [sum(d.cpu[k] - d.cpu[k - 1] for d in drivers) * 1000 for k in range(warmup, warmup + rounds) if k > 0]
    return {
        "downstream": down,
        "upstream": up,
        "sessions": sessions,
        "upstream_refs": held,
        "rounds": rounds,
        "all_ms": {"p50": median(alls), "p99": pct(alls, 99), "max": max(alls)},
        "per_session_ms": {"p50": median(per_session), "p99": pct(per_session, 99)},
        "gateway_cpu_ms_per_round": median(cpu),
        "clients_cpu_ms_per_round": median(client_cpu),
    }


async def amain(
    sessions: int, rounds: int, warmup: int, configs: list[tuple[str, str]], profile: str | None
) -> dict[str, Any]:
    results = []
    for down, up in configs:
        print(f"  {down} downstream, {up} upstream: {sessions} sessions, {rounds} rounds ...", file=sys.stderr)
        where = f"{profile}.{down}-{up}" if profile else None
        results.append(await run_config(down, up, sessions, rounds, warmup, where))
        print(f"    {json.dumps(results[-1])}", file=sys.stderr)
    return {"environment": environment(), "target_ms": TARGET_MS, "results": results}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--driver":
        url, mode, token_file = sys.argv[2:5]
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        asyncio.run(_driver(url, mode, json.loads(Path(token_file).read_text())))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="10 measured rounds instead of 30")
    p.add_argument("--sessions", type=int, default=200)
    p.add_argument("--json")
    p.add_argument(
        "--config",
        action="append",
        metavar="DOWN/UP",
        help="run only these configurations (e.g. raw/modern); repeatable",
    )
    p.add_argument("--profile", metavar="PATH", help="cProfile the measured rounds into PATH.<config>")
    a = p.parse_args()
    rounds = 10 if a.quick else 30
    configs = [tuple(c.split("/", 1)) for c in a.config] if a.config else CONFIGS
    t0 = time.perf_counter()
    out = anyio.run(amain, a.sessions, rounds, 3, configs, a.profile)
    print(f"resource-update fan-out, {a.sessions} sessions on one resource (wall {time.perf_counter() - t0:.0f} s)")
    head = f"{'downstream':<11}{'upstream':<10}{'refs':>5}  {'all received p50':>17}{'p99':>9}{'max':>9}"
    print(f"{head}  {'per session p50':>16}  {'gw cpu':>9}  {'clients cpu':>11}  target")
    for r in out["results"]:
        a_ms, s_ms = r["all_ms"], r["per_session_ms"]
        ok = verdict(a_ms["p50"] <= TARGET_MS)
        print(
            f"{r['downstream']:<11}{r['upstream']:<10}{r['upstream_refs']:>5}  {a_ms['p50']:>14.1f} ms"
            f"{a_ms['p99']:>6.1f} ms{a_ms['max']:>6.1f} ms  {s_ms['p50']:>13.1f} ms"
            f"  {r['gateway_cpu_ms_per_round']:>6.1f} ms  {r['clients_cpu_ms_per_round']:>8.1f} ms"
            f"  <= {TARGET_MS:.0f} ms {ok}"
        )
    if a.json:
        dump_json(a.json, out)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    sys.exit(main())
