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
            with anyio.fail_after(60):
                while True:
                    if proc.returncode is not None:
                        raise RuntimeError(f"{argv} exited with {proc.returncode}")
                    with contextlib.suppress(httpx2.HTTPError):
                        if (await http.get(f"http://127.0.0.1:{port}{ready_path}")).status_code < 500:
                            break
                    await anyio.sleep(0.1)
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
    clients: list[Any], tool: str, calls: int | None, duration_s: float | None
) -> tuple[list[float], float]:
    """Each client calls ``tool`` back to back, ``calls`` times or for ``duration_s``: the
    latencies (ms) and the elapsed seconds. An error result raises (a bench of errors is no bench)."""
    lat: list[float] = []
    deadline = time.perf_counter() + (duration_s or 0)
    t0 = time.perf_counter()

    async def loop(c: Any) -> None:
        n = 0
        while (n < calls) if calls is not None else (time.perf_counter() < deadline):
            n += 1
            s = time.perf_counter()
            r = await c.call_tool(tool, ARGS)
            lat.append((time.perf_counter() - s) * 1000)
            if r.is_error:
                raise RuntimeError(f"{tool}: error result {r}")

    async with anyio.create_task_group() as tg:
        for c in clients:
            tg.start_soon(loop, c)
    return lat, time.perf_counter() - t0


_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


#: The 2025-era handshake a raw client sends: ``initialize``, then ``notifications/initialized``.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


async def raw_session(http: httpx2.AsyncClient, url: str) -> str:
    """Open a 2025-era session with raw HTTP (initialize + initialized): its ``Mcp-Session-Id``."""
    r = await http.post(url, json=INITIALIZE, headers=_HEADERS)
    sid = r.headers["mcp-session-id"]
    headers = _HEADERS | {"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
    await http.post(url, json=INITIALIZED, headers=headers)
    return sid


async def list_once(http: httpx2.AsyncClient, url: str, sid: str, i: int, parse: bool = True) -> tuple[float, int]:
    """One ``tools/list``: the time until its last byte arrived (the client's own JSON parsing of
    ~300 KB, ~8 ms here, is not the gateway's) and, if ``parse``, how many tools it listed."""
    headers = _HEADERS | {"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
    s = time.perf_counter()
    r = await http.post(url, json={"jsonrpc": "2.0", "id": i, "method": "tools/list"}, headers=headers)
    body = r.text
    dt = (time.perf_counter() - s) * 1000
    if not parse:
        return dt, body.count('"inputSchema"')
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        body = next(x[5:] for x in body.splitlines() if x.startswith("data:") and x[5:].strip())
    return dt, len(json.loads(body).get("result", {}).get("tools", []))
