"""Running the gateway: the engine on a config file plus the MCP front door over streamable
HTTP (``serve``) or stdio (``stdio``). Everything started here is owned by one task group and
stopped exactly once (I14); the process never restarts itself (I15)."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server.stdio import stdio_server

from mcp_reconciler.api.auth import Authenticator
from mcp_reconciler.api.bundled_demo import BundledDemo, bundled_demo, describe
from mcp_reconciler.api.control import Control
from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.http_app import build_app
from mcp_reconciler.api.routes import routes as control_routes
from mcp_reconciler.api.views import status_json
from mcp_reconciler.reconciler.authority import GrantPolicy
from mcp_reconciler.reconciler.gateway import Gateway

log = logging.getLogger("mcp_reconciler.server")


@dataclass
class Served:
    gateway: Gateway
    front: FrontDoor
    url: str
    port: int
    control: Control | None = None

    @property
    def base_url(self) -> str:
        return self.url.removesuffix("/mcp")


def _front(gw: Gateway, transport: str) -> FrontDoor:
    settings = gw.settings
    engine = gw.engine

    async def status() -> dict[str, Any]:
        return status_json(await engine.status())

    async def refresh() -> int | None:
        return (await engine.refresh()).revision

    return FrontDoor(
        engine,
        engine.sessions,
        grant_policy=GrantPolicy(settings.grant_policy if settings else "current"),
        expose_control_tools=bool(settings and settings.expose_control_tools),
        status=status,
        refresh=refresh,
        transport=transport,  # type: ignore[arg-type]
    )


@contextlib.asynccontextmanager
async def serve_http(
    config_path: str | Path,
    *,
    host: str | None = None,
    port: int | None = None,
    watch_interval_s: float = 1.0,
    authenticator: Authenticator | None = None,
    insecure_no_auth: bool = False,
) -> AsyncIterator[Served]:
    """Start the gateway on ``config_path`` and serve it; leaving the block stops it all.
    ``port=0`` binds an ephemeral port (tests)."""
    async with Gateway(config_path, watch_interval_s=watch_interval_s) as gw:
        settings = gw.settings
        bind_host = host or (settings.host if settings else "127.0.0.1")
        bind_port = port if port is not None else (settings.port if settings else 8765)
        front = _front(gw, "http")
        auth = authenticator or Authenticator.from_env(insecure_no_auth=insecure_no_auth)
        if auth.insecure_no_auth:
            log.warning("INSECURE: --insecure-no-auth is set: every control-API request acts as operator. Demos only.")
        elif not auth.configured:
            log.warning(
                "no control-API tokens configured (MCP_RECONCILER_OPERATOR_TOKENS / MCP_RECONCILER_OWNER_TOKENS): "
                "every /v1 request will answer 401"
            )
        control = Control(gw.engine, front, auth)
        app = build_app(
            front, allowed_hosts=settings.allowed_hosts if settings else (), extra_routes=control_routes(control)
        )
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only when the
        # listening socket's proto says TCP; with proto 0, Nagle + delayed ACK add ~40 ms per response.
        sock = socket.socket(
            socket.AF_INET6 if ":" in bind_host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP
        )
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind_host, bind_port))
        except OSError as exc:
            sock.close()
            raise OSError(f"cannot listen on {bind_host}:{bind_port}: {exc.strerror}; choose another --port") from exc
        actual_port = sock.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=3, access_log=False)
        )
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(front.run)

                async def serve() -> None:
                    try:
                        await server.serve([sock])
                    finally:
                        tg.cancel_scope.cancel()  # uvicorn stopped (signal or should_exit): stop the rest

                tg.start_soon(serve)
                with anyio.fail_after(30):
                    while not server.started:  # noqa: ASYNC110 - uvicorn exposes no started event
                        await anyio.sleep(0.01)
                try:
                    yield Served(gw, front, f"http://{bind_host}:{actual_port}/mcp", actual_port, control)
                finally:
                    # Close the engine while HTTP is still up, so calls in flight end with the
                    # sanitized "shutting down" error instead of a dropped stream (I12, I14).
                    with anyio.CancelScope(shield=True):
                        await gw.engine.aclose()
                    server.should_exit = True
        finally:
            sock.close()


async def run_serve(
    config_path: str | Path | None, host: str | None, port: int | None, insecure_no_auth: bool = False
) -> int:
    """``mcp-reconciler serve``: serve ``config_path`` (``None``: the bundled demo) until a signal
    stops it, printing a startup banner and each publication on stdout; SIGHUP reloads."""
    if config_path is None:
        with bundled_demo() as demo:  # the demo's files outlive the gateway (and its upstreams)
            return await _serve_until_stopped(demo.config, demo, host, port, insecure_no_auth)
    return await _serve_until_stopped(Path(config_path), None, host, port, insecure_no_auth)


async def _serve_until_stopped(
    path: Path, demo: BundledDemo | None, host: str | None, port: int | None, insecure_no_auth: bool
) -> int:
    # Whoever reads our stdout may go away (`serve | head -3`): then stop the way a signal does
    # (leave serve_http's block normally, so uvicorn shuts down gracefully) and tell the CLI,
    # which exits 0 quietly on a closed pipe.
    stdout_closed = anyio.CancelScope()
    async with serve_http(path, host=host, port=port, insecure_no_auth=insecure_no_auth) as served:
        engine = served.gateway.engine

        def say(line: str) -> None:
            try:
                print(line, flush=True)
            except BrokenPipeError:
                stdout_closed.cancel()

        live = engine.current
        tools = sorted(live.generation.tools) if live is not None else []
        say(f"mcp-reconciler serving {path}")
        if demo is not None:
            say(describe(demo))
        say(f"  MCP endpoint: {served.url}   (both protocol eras)")
        say(f"  control API: {served.base_url}/v1/status   health: /healthz  readiness: /readyz")
        if insecure_no_auth:
            say("  WARNING: --insecure-no-auth: the control API accepts every request as operator")
        say(f"  revision {engine.current_revision}: {len(tools)} tools {tools}")
        engine.add_listener(lambda new, old: say(f"  published revision {engine.current_revision}"))
        with stdout_closed, anyio.open_signal_receiver(signal.SIGHUP) as signals:
            say("  SIGHUP reloads the config; Ctrl-C stops.")  # once it is true: scripts may signal now
            async for _ in signals:
                out = await engine.refresh(["config"])
                say(f"  SIGHUP: reload cycle {out.status}, revision {out.revision}")
    if stdout_closed.cancel_called:
        raise BrokenPipeError("stdout closed")
    return 0


async def run_stdio(config_path: str | Path | None) -> int:
    """One downstream session over this process's stdin/stdout (logs go to stderr);
    ``config_path=None`` serves the bundled demo."""
    if config_path is None:
        with bundled_demo() as demo:
            print(describe(demo).strip(), file=sys.stderr, flush=True)  # stdout carries the protocol
            return await _stdio(demo.config)
    return await _stdio(Path(config_path))


async def _stdio(config_path: Path) -> int:
    async with Gateway(config_path) as gw:
        front = _front(gw, "stdio")
        async with anyio.create_task_group() as tg:
            await tg.start(front.run)
            async with stdio_server() as (read, write):
                await front.server.run(read, write, front.server.create_initialization_options())
            tg.cancel_scope.cancel()
    return 0
