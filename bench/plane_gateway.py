"""A gateway process for ``bench_dataplane.py`` whose only HTTP layer is the new data plane
(``api/plane``, issue 26) on the same uvicorn + httptools stack as ``mcp-reconciler serve``. It
binds port 0 and writes the port it got to ``--port-file`` (atomically) once listening;
SIGTERM/SIGINT stops it.

Bench-only: production never builds the new plane until the switch-over (ADR 0035), so there
is no second live path in ``mcp-reconciler serve``.

``--loop-stats`` (``bench_upstream_bounds.py``, ADR 0040) also answers ``GET /healthz`` and
``GET /bench/loop``: the event loop's figures since the last such GET — a 5 ms ticker's worst
lateness and p99 (ms), and the longest stretch of this thread's own CPU between two ticks (ms:
the loop held by the gateway itself, whatever else the machine runs).

    python bench/plane_gateway.py --config gw.yaml --port-file plane.port [--loop-stats]"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import socket
import sys
import time
from typing import Any

import anyio
import uvicorn

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.mcp_auth import SessionTokens
from mcp_reconciler.api.plane.asgi import build_plane
from mcp_reconciler.api.plane.pipeline import EdgePolicy
from mcp_reconciler.api.server import anonymous_grants
from mcp_reconciler.reconciler.gateway import Gateway


class LoopStats:
    """A 5 ms ticker on the loop: how late each wake-up is, and this thread's CPU between two."""

    def __init__(self) -> None:
        self.late: list[float] = []
        self.own: list[float] = []

    async def run(self) -> None:
        while True:
            due, cpu0 = time.perf_counter() + 0.005, time.thread_time()
            await anyio.sleep(0.005)
            self.late.append(max(0.0, time.perf_counter() - due) * 1000)
            self.own.append((time.thread_time() - cpu0) * 1000)

    def take(self) -> dict[str, float]:
        late, own = sorted(self.late) or [0.0], self.own or [0.0]
        self.late, self.own = [], []
        return {"late_max_ms": late[-1], "late_p99_ms": late[int(0.99 * (len(late) - 1))], "own_max_ms": max(own)}


def with_loop_stats(app: Any, stats: LoopStats) -> Any:
    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path") if scope["type"] == "http" else None
        if path in ("/healthz", "/bench/loop"):
            body = b"ok" if path == "/healthz" else json.dumps(stats.take()).encode()
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]}
            )
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return wrapped


async def amain(config: str, port_file: str, loop_stats: bool = False) -> None:
    gc.collect()
    gc.freeze()  # as ``mcp-reconciler serve`` does (api/cli.py)
    async with Gateway(config) as gw:
        front = FrontDoor(gw.engine, gw.engine.sessions)
        pipe, plane = build_plane(
            front,
            EdgePolicy(credentials=[SessionTokens(front.authority)], anonymous=lambda: anonymous_grants(gw.settings)),
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        stats = LoopStats()
        app = with_loop_stats(pipe.app, stats) if loop_stats else pipe.app
        server = uvicorn.Server(
            uvicorn.Config(app, http="httptools", log_level="warning", lifespan="off", access_log=False)
        )
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as tg:
                await tg.start(front.run)
                await tg.start(plane.run)
                tg.start_soon(server.serve, [sock])
                if loop_stats:
                    tg.start_soon(stats.run)
                while not server.started:
                    await anyio.sleep(0.01)
                partial = port_file + ".tmp"
                with open(partial, "w", encoding="ascii") as f:  # noqa: ASYNC230 - a few bytes, once
                    f.write(str(sock.getsockname()[1]))
                os.replace(partial, port_file)  # the reader never sees a half-written port
                async for _ in signals:
                    break
                pipe.drain.close()
                server.should_exit = True
                tg.cancel_scope.cancel()
        sock.close()


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--loop-stats", action="store_true", help="also serve /healthz and /bench/loop")
    args = p.parse_args()
    anyio.run(amain, args.config, args.port_file, args.loop_stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
