"""A gateway process for ``bench_dataplane.py`` whose only HTTP layer is the new data plane
(``api/plane``, issue 26) on the same uvicorn + httptools stack as ``mcp-reconciler serve``. It
binds port 0 and writes the port it got to ``--port-file`` (atomically) once listening;
SIGTERM/SIGINT stops it.

Bench-only: production never builds the new plane until the switch-over (ADR 0035), so there
is no second live path in ``mcp-reconciler serve``.

    python bench/plane_gateway.py --config gw.yaml --port-file plane.port"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys

import anyio
import uvicorn

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.mcp_auth import SessionTokens
from mcp_reconciler.api.plane.asgi import build_plane
from mcp_reconciler.api.plane.pipeline import EdgePolicy
from mcp_reconciler.api.server import anonymous_grants
from mcp_reconciler.reconciler.config import GatewaySettings
from mcp_reconciler.reconciler.gateway import Gateway


async def amain(config: str, port_file: str) -> None:
    async with Gateway(config) as gw:
        front = FrontDoor(gw.engine, gw.engine.sessions)
        limits = (gw.settings or GatewaySettings()).limits  # the 2025-era session bounds, as `serve` reads them
        pipe, plane = build_plane(
            front,
            EdgePolicy(credentials=[SessionTokens(front.authority)], anonymous=lambda: anonymous_grants(gw.settings)),
            max_sessions=limits.transport_sessions,
            max_sessions_per_client=limits.transport_sessions_per_client,
            session_idle_s=limits.session_idle_s,
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(
            uvicorn.Config(pipe.app, http="httptools", log_level="warning", lifespan="off", access_log=False)
        )
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as tg:
                await tg.start(front.run)
                await tg.start(plane.run)
                tg.start_soon(server.serve, [sock])
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
    args = p.parse_args()
    anyio.run(amain, args.config, args.port_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
