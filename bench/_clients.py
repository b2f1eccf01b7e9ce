"""What the benches share to start servers and call them: a process's CPU and the load average
from ``/proc``, a gateway or test upstream started on a kernel-picked port and waited for, SDK
clients calling a tool sequentially or for a fixed time, and raw-HTTP 2025-era sessions that
list tools (so a thousand sessions keep the client side light).

Imported by the bench scripts with ``bench/`` on ``sys.path`` (they are run as files, not as a
package). Helpers only: nothing here prints, times a goal or asserts one."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
from _ports import port_args, reported_port
from mcp import Client

from tests.support.raw_mcp import INITIALIZED as INITIALIZED  # re-exported: bench_plane_goals sends it
from tests.support.raw_mcp import legacy_headers, legacy_initialize, legacy_open
from tests.support.waits import until

REPO_ROOT = Path(__file__).resolve().parent.parent
#: The test upstream (``tests/support/upstream_server.py``): ``--transport http`` and ``--tools``.
UPSTREAM = [sys.executable, "-m", "tests.support.upstream_server"]
ARGS = {"x": "1"}  # the arguments of every benched ``echo`` call
CLK = os.sysconf("SC_CLK_TCK")


def loadavg() -> str:
    """The 1/5/15-minute load averages, as ``/proc/loadavg`` gives them."""
    with open("/proc/loadavg", encoding="ascii") as f:
        return " ".join(f.read().split()[:3])


def cpu_s(pid: int) -> float:
    """Process ``pid``'s own CPU seconds so far (utime + stime; clock ticks, 10 ms)."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        stat = fh.read()
    f = stat[stat.rfind(b")") + 2 :].split()
    return (int(f[11]) + int(f[12])) / CLK


@contextlib.asynccontextmanager
async def process(argv: list[str], ready_path: str, port_file: Path) -> AsyncIterator[tuple[int, int]]:
    """Start ``argv`` (a server told to bind port 0 and write the port it got to ``port_file``),
    wait until ``ready_path`` answers there (below 500 for ``/readyz``: published), yield its pid
    and port; stop and reap it on exit."""
    await anyio.Path(port_file).unlink(missing_ok=True)  # a rerun writes it afresh
    env = {**os.environ, "MCP_RECONCILER_OPERATOR_TOKENS": "bench-operator"}
    proc = await anyio.open_process(
        argv, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=None
    )
    try:
        port = await reported_port(port_file, lambda: proc.returncode)
        async with httpx2.AsyncClient() as http:

            async def ready() -> bool:  # another process: its readiness endpoint
                if proc.returncode is not None:
                    raise RuntimeError(f"{argv} exited with {proc.returncode}")
                with contextlib.suppress(httpx2.HTTPError):
                    return (await http.get(f"http://127.0.0.1:{port}{ready_path}")).status_code < 500
                return False

            await until(ready, what=f"{ready_path} on port {port}", timeout_s=60, every_s=0.1)
        yield proc.pid, port
    finally:
        await stop(proc)


async def stop(proc: anyio.abc.Process) -> None:
    """Terminate, then kill, and reap ``proc`` (shielded: runs during cancellation too)."""
    with anyio.CancelScope(shield=True):
        proc.terminate()
        with anyio.move_on_after(10):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def gateway_argv(cfg: Path, port_file: Path) -> list[str]:
    """``mcp-reconciler serve`` on ``cfg``, on a kernel-picked port reported to ``port_file``."""
    return [sys.executable, "-m", "mcp_reconciler.api.cli", "serve", "--config", str(cfg), *port_args(port_file)]


async def open_client(stack: contextlib.AsyncExitStack, url: str, era: str) -> Any:
    """An SDK client of ``era`` (``legacy`` or a 2026 version) on ``url``, its tools listed
    (``call_tool`` would otherwise list for output schemas inside the first timed call)."""
    c = await stack.enter_async_context(Client(url, mode=era))
    await c.list_tools()
    return c


async def run_calls(
    clients: list[Any], tool: str, calls: int | None, duration_s: float | None, errors: list[str] | None = None
) -> tuple[list[float], float]:
    """Each client calls ``tool`` back to back, ``calls`` times or for ``duration_s``: the
    latencies (ms) and the elapsed seconds. An error raises (a bench of errors is no bench) unless
    ``errors`` is given: then each is recorded there, counted and reported by the caller, never
    hidden (a failed call has no latency; every client stops once there are more than 50)."""
    lat: list[float] = []
    deadline = time.perf_counter() + (duration_s or 0)
    t0 = time.perf_counter()

    async def loop(c: Any) -> None:
        n = 0
        while (n < calls) if calls is not None else (time.perf_counter() < deadline):
            n += 1
            s = time.perf_counter()
            try:
                r = await c.call_tool(tool, ARGS)
            except Exception as exc:
                if errors is None:
                    raise
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
                if len(errors) > 50:
                    return
                continue
            lat.append((time.perf_counter() - s) * 1000)
            if r.is_error:
                if errors is None:
                    raise RuntimeError(f"{tool}: error result {r}")
                errors.append("is_error result")

    async with anyio.create_task_group() as tg:
        for c in clients:
            tg.start_soon(loop, c)
    return lat, time.perf_counter() - t0


#: The 2025-era handshake a raw client sends: ``initialize``, then ``notifications/initialized``
#: (the tests' own, ``tests/support/raw_mcp.py``).
INITIALIZE = legacy_initialize()


async def raw_session(http: httpx2.AsyncClient, url: str) -> str:
    """Open a 2025-era session with raw HTTP (initialize + initialized): its ``Mcp-Session-Id``."""
    return (await legacy_open(http, url)).headers["mcp-session-id"]


async def list_once(http: httpx2.AsyncClient, url: str, sid: str, i: int, parse: bool = True) -> tuple[float, int]:
    """One ``tools/list``: the time until its last byte arrived (the client's own JSON parsing of
    ~300 KB, ~8 ms here, is not the gateway's) and, if ``parse``, how many tools it listed."""
    headers = legacy_headers(sid)
    s = time.perf_counter()
    r = await http.post(url, json={"jsonrpc": "2.0", "id": i, "method": "tools/list"}, headers=headers)
    body = r.text
    dt = (time.perf_counter() - s) * 1000
    if not parse:
        return dt, body.count('"inputSchema"')
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        body = next(x[5:] for x in body.splitlines() if x.startswith("data:") and x[5:].strip())
    return dt, len(json.loads(body).get("result", {}).get("tools", []))
