"""Running the gateway: the engine on a config file plus the MCP front door over streamable
HTTP (``serve``) or stdio (``stdio``). Everything started here is owned by one task group and
stopped exactly once (I14); the process never restarts itself (I15).

This module is over 400 lines because it is the composition root of both modes: ``serve_http``
starts every edge part in one place, so their start and stop order (I14) reads top to bottom."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import uvicorn

from mcp_reconciler.api.auth import Authenticator
from mcp_reconciler.api.bundled_demo import BundledDemo, bundled_demo, describe
from mcp_reconciler.api.console import Console
from mcp_reconciler.api.control import MAX_BODY_BYTES, Control
from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.http_app import build_app
from mcp_reconciler.api.http_limits import (
    ACCEPT_BACKLOG,
    LISTEN_QUEUE,
    ConnectionGuard,
    descriptor_budget,
    install_accept_error_handler,
)
from mcp_reconciler.api.lifecycle import Drain, GatewayUvicorn
from mcp_reconciler.api.oauth.edge import OAuthEdge
from mcp_reconciler.api.oauth.identity import GrantSet
from mcp_reconciler.api.oauth.resource_server import ResourceServer
from mcp_reconciler.api.observability import LimitGauges, Observability, observed
from mcp_reconciler.api.plane.sessions import SessionTable
from mcp_reconciler.api.plane.stdio import StdioPlane
from mcp_reconciler.api.routes import routes as control_routes
from mcp_reconciler.api.stdio_input import stdio_wire
from mcp_reconciler.api.views import owner_view, status_out
from mcp_reconciler.reconciler.config import GatewaySettings, TelemetryConfig
from mcp_reconciler.reconciler.gateway import Gateway
from mcp_reconciler.reconciler.telemetry import state_gauges
from mcp_reconciler.sdk import wire

log = logging.getLogger("mcp_reconciler.server")


@dataclass
class Served:
    """A served gateway. Leaving ``serve_http`` gives operations in flight :attr:`grace_s` to
    finish (0 by default: an embedder's exit ends them at once; ``serve`` sets the config's
    ``shutdown_grace_s``); setting :attr:`hurry` while it stops cuts the grace short."""

    gateway: Gateway
    front: FrontDoor
    url: str
    port: int
    control: Control | None = None
    hurry: anyio.Event = field(default_factory=anyio.Event)
    connections: ConnectionGuard | None = None  # the HTTP connection bound (I18), for status and tests
    transport_sessions: SessionTable | None = None  # 2025-era sessions on /mcp, counted per client
    grace_s: float = 0.0
    oauth: OAuthEdge | None = None  # access tokens on /mcp and /v1 (the config's oauth: section)
    observability: Observability | None = None  # /metrics, the metrics listener, the audit trail

    @property
    def base_url(self) -> str:
        """The gateway's base URL (``url`` without its ``/mcp`` path): where ``/v1``, ``/healthz`` and
        ``/readyz`` answer."""
        return self.url.removesuffix("/mcp")


#: Printed by ``serve`` (and logged) when the config opens anonymous access to ``/mcp``.
ANONYMOUS_WARNING = (
    "WARNING: anonymous access to /mcp is ON (gateway.anonymous, grant_policy {policy}): any client that can "
    "reach {url} gets a session without a credential. Remove gateway.anonymous to require session tokens."
)


def anonymous_grants(settings: GatewaySettings | None) -> GrantSet | None:
    """The grant spec of anonymous ``/mcp`` callers per ``gateway.anonymous``; ``None``: refused."""
    anonymous = settings.anonymous if settings is not None else None
    if anonymous is None:
        return None
    return GrantSet(anonymous.grant_policy, sources=frozenset(anonymous.sources))


def _front(gw: Gateway, view: str | None = None) -> FrontDoor:
    settings = gw.settings
    loaded = gw.desired.last_good
    engine = gw.engine

    async def status(operator: bool) -> dict[str, Any]:
        out = status_out(await engine.status())
        return wire.dump(out if operator else owner_view(out))

    async def refresh() -> int | None:
        return (await engine.refresh()).revision

    return FrontDoor(
        engine,
        engine.sessions,
        local=GrantSet(settings.grant_policy if settings else "current"),
        local_view=view,
        expose_control_tools=bool(settings and settings.expose_control_tools),
        status=status,
        refresh=refresh,
        served_names_max=loaded.telemetry.served_names_max if loaded is not None else 200,
    )


class _AnonymousPolicy:
    """``gateway.anonymous`` of the newest valid config, read per request (a reload that turns
    anonymous access off takes effect at once); a change is logged, turning it on loudly."""

    def __init__(self, gw: Gateway) -> None:
        self._gw = gw
        self._last = anonymous_grants(gw.settings)

    def __call__(self) -> GrantSet | None:
        grants = anonymous_grants(self._gw.settings)
        if grants != self._last:
            if grants is None:
                log.warning("anonymous access to /mcp is now OFF (config reload)")
            else:
                log.warning("anonymous access to /mcp is now ON (config reload), grant_policy %s", grants.policy)
            self._last = grants
        return grants


@contextlib.asynccontextmanager
async def serve_http(
    config_path: str | Path,
    *,
    host: str | None = None,
    port: int | None = None,
    watch_interval_s: float = 1.0,
    authenticator: Authenticator | None = None,
    insecure_no_auth: bool = False,
    listen_socket: socket.socket | None = None,
) -> AsyncIterator[Served]:
    """Start the gateway on ``config_path`` and serve it; leaving the block stops it all, in the
    order ``api/lifecycle.py`` gives (stop accepting, grace, close the engine while HTTP is up,
    stop HTTP, stop upstreams). ``port=0`` binds an ephemeral port (tests). ``listen_socket``, a
    TCP socket already bound (e.g. to port 0 by whoever must write its URL into the config
    first), is served instead of binding one; it is closed when the block ends."""
    async with Gateway(config_path, watch_interval_s=watch_interval_s) as gw, contextlib.AsyncExitStack() as stack:
        settings = gw.settings or GatewaySettings()
        limits = settings.limits
        bind_host = host or settings.host
        bind_port = port if port is not None else settings.port
        front = _front(gw)
        auth = authenticator or Authenticator.from_env(insecure_no_auth=insecure_no_auth)
        anonymous = _AnonymousPolicy(gw)
        if anonymous() is not None:
            log.warning("anonymous access to /mcp is ON (gateway.anonymous): clients need no credential")
        loaded = gw.desired.last_good
        oauth_config = loaded.oauth if loaded is not None else None
        oauth: OAuthEdge | None = None
        if oauth_config is not None:
            # Built once: a change to the oauth: section takes effect at the next start (ADR 0011).
            oauth = OAuthEdge(await stack.enter_async_context(ResourceServer(oauth_config)), auth)
            log.info(
                "OAuth: accepting access tokens for %s from %s on /mcp and /v1",
                oauth_config.resource,
                ", ".join(i.issuer for i in oauth_config.issuers),
            )
        if auth.insecure_no_auth:
            log.warning("INSECURE: --insecure-no-auth is set: every control-API request acts as operator. Demos only.")
        elif not auth.configured and oauth is None:
            log.warning(
                "no control-API tokens configured (MCP_RECONCILER_OPERATOR_TOKENS / MCP_RECONCILER_OWNER_TOKENS): "
                "every /v1 request will answer 401"
            )
        control = Control(gw.engine, front, auth)
        cluster = gw.engine.cluster_status()
        obs = await stack.enter_async_context(
            observed(
                gw.engine,
                front,
                auth,
                loaded.telemetry if loaded is not None else TelemetryConfig(),
                config_dir=loaded.path.parent if loaded is not None else Path.cwd(),
                replica=cluster.replica_id if cluster is not None else None,
            )
        )
        surface = build_app(
            front,
            allowed_hosts=settings.allowed_hosts,
            extra_routes=[*obs.routes(), *control_routes(control)],
            anonymous=anonymous,
            oauth=oauth,
            session_idle_timeout_s=limits.session_idle_s,
            max_sessions=limits.transport_sessions,
            max_sessions_per_client=limits.transport_sessions_per_client,
            max_body_bytes=limits.body_bytes,
            rest_body_limits={"/v1": MAX_BODY_BYTES},
        )
        transport_sessions = surface.transport_sessions
        budget = descriptor_budget(limits.connections, limits.fd_reserve)
        if budget.connections < limits.connections:
            log.warning(
                "the descriptor limit (%d, %d in use, %d reserved) allows %d downstream connections, "
                "not the %d configured (gateway.limits.connections)",
                budget.soft_limit,
                budget.in_use,
                budget.reserve,
                budget.connections,
                limits.connections,
            )
        guard = ConnectionGuard(
            connections=budget.connections, header_timeout_s=limits.header_timeout_s, header_bytes=limits.header_bytes
        )
        stack.enter_context(state_gauges.observing(LimitGauges(guard, surface.bodies, transport_sessions, obs)))
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only when the
        # listening socket's proto says TCP; with proto 0, Nagle + delayed ACK add ~40 ms per response.
        if listen_socket is not None:
            sock = listen_socket
            bind_host = sock.getsockname()[0]
        else:
            sock = socket.socket(
                socket.AF_INET6 if ":" in bind_host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP
            )
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((bind_host, bind_port))
            except OSError as exc:
                sock.close()
                reason = f"cannot listen on {bind_host}:{bind_port}: {exc.strerror}; choose another --port"
                raise OSError(reason) from exc
        actual_port = sock.getsockname()[1]
        server = GatewayUvicorn(
            uvicorn.Config(
                surface.app,
                http=guard.protocol(),
                log_level="warning",
                log_config=None,  # uvicorn's records go through the gateway's handler (redacted, rate-limited)
                ws="none",  # no WebSocket routes: an Upgrade request is just a request
                lifespan="on",
                timeout_graceful_shutdown=3,
                timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]  # uvicorn accepts a float
                backlog=ACCEPT_BACKLOG,
                access_log=False,
            )
        )
        hurry = anyio.Event()
        try:
            with install_accept_error_handler():
                async with anyio.create_task_group() as tg:
                    await tg.start(front.run)
                    await tg.start(guard.run)
                    await tg.start(surface.plane.run)

                    async def serve() -> None:
                        try:
                            await server.serve([sock])
                        finally:
                            tg.cancel_scope.cancel()  # uvicorn stopped on its own: stop the rest

                    tg.start_soon(serve)
                    with anyio.fail_after(30):
                        while not server.started:  # noqa: ASYNC110 - uvicorn exposes no started event
                            await anyio.sleep(0.01)
                    # asyncio uses its backlog both for listen() and as the accepts per loop tick;
                    # keep the batch small (descriptor budget) but the kernel's queue long, so a
                    # connection flood does not drop a legitimate client's SYN.
                    sock.listen(LISTEN_QUEUE)
                    served = Served(
                        gw,
                        front,
                        f"http://{bind_host}:{actual_port}/mcp",
                        actual_port,
                        control,
                        hurry,
                        guard,
                        transport_sessions,
                        oauth=oauth,
                        observability=obs,
                    )
                    try:
                        yield served
                    finally:
                        with anyio.CancelScope(shield=True):
                            await _stop(gw, server, surface.drain, transport_sessions, served.grace_s, hurry)
        finally:
            sock.close()


async def _stop(
    gw: Gateway,
    server: GatewayUvicorn,
    drain: Drain,
    sessions: SessionTable,
    grace_s: float,
    hurry: anyio.Event,
) -> None:
    """Steps 1-3 of ``api/lifecycle.py``; uvicorn's own shutdown (step 4) follows ``should_exit``."""
    server.stop_accepting()
    drain.close()
    # Calls parked for an approval cannot be approved any more (/v1 is closed): answer them now,
    # with a clear retryable error, before the grace period (ADR 0034).
    parked = gw.engine.approvals.withdraw_all("the gateway is shutting down")
    if parked:
        log.info("stopping: answered %d call(s) parked for an approval", parked)
    running = gw.engine.operations()
    if running:
        log.info("stopping: %d operation(s) in flight get up to %.1f s to finish", running, grace_s)
        async with anyio.create_task_group() as tg:

            async def cut_short() -> None:
                await hurry.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(cut_short)
            left = await gw.engine.settle(grace_s)
            tg.cancel_scope.cancel()
        if left:
            log.info("stopping: ending %d operation(s) still in flight", left)
    # Close the engine while HTTP is still up, so calls in flight end with the sanitized
    # "shutting down" error instead of a dropped stream (I12, I14).
    await gw.engine.aclose()
    # Legacy sessions' GET streams never end by themselves: end them, so HTTP stops without
    # waiting out its graceful timeout (and cancelling them) on their account.
    await sessions.close_all()
    server.should_exit = True


async def run_serve(
    config_path: str | Path | None,
    host: str | None,
    port: int | None,
    insecure_no_auth: bool = False,
    port_file: str | None = None,
) -> int:
    """``mcp-reconciler serve``: serve until SIGINT or SIGTERM (either stops gracefully, exit 0; a
    second one cuts the grace short), reloading the config on SIGHUP. Output lines on stdout are
    best effort (``api/console.py``): an unwritable stdout never stops the gateway. ``port_file``
    gets the port listened on once the gateway serves (``--port 0`` then tells who started it
    which port it got, whatever happens to stdout)."""
    if config_path is None:
        with bundled_demo() as demo:  # the demo's files outlive the gateway (and its upstreams)
            return await _serve_until_stopped(demo.config, demo, host, port, insecure_no_auth, port_file)
    return await _serve_until_stopped(Path(config_path), None, host, port, insecure_no_auth, port_file)


def _write_port_file(path: str, port: int) -> None:
    """``port`` into ``path`` atomically (written aside, then renamed): a reader never sees half."""
    target = Path(path)
    aside = target.with_name(f".{target.name}.{os.getpid()}")
    aside.write_text(f"{port}\n")
    aside.replace(target)


async def _serve_until_stopped(
    path: Path,
    demo: BundledDemo | None,
    host: str | None,
    port: int | None,
    insecure_no_auth: bool,
    port_file: str | None = None,
) -> int:
    console = Console()
    stop = anyio.Event()
    reload = anyio.Event()
    state: dict[str, Served] = {}
    # Signals are ours for the whole run, teardown included (see api/lifecycle.py).
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals, _sole_error():
        async with anyio.create_task_group() as tg:
            startup = anyio.CancelScope()

            async def on_signals() -> None:
                async for signum in signals:
                    if signum == signal.SIGHUP:
                        reload.set()
                    elif not stop.is_set():
                        log.info("received %s: stopping", signal.Signals(signum).name)
                        stop.set()
                        if "served" not in state:
                            startup.cancel()  # still starting: stop starting
                    else:
                        log.info(
                            "received %s while stopping: ending operations in flight now", signal.Signals(signum).name
                        )
                        if "served" in state:
                            state["served"].hurry.set()

            tg.start_soon(on_signals)
            with startup:
                async with serve_http(path, host=host, port=port, insecure_no_auth=insecure_no_auth) as served:
                    state["served"] = served
                    settings = served.gateway.settings
                    served.grace_s = settings.shutdown_grace_s if settings is not None else 10.0
                    engine = served.gateway.engine
                    live = engine.current
                    tools = sorted(live.generation.tools) if live is not None else []
                    console.say(f"mcp-reconciler serving {path}")
                    if demo is not None:
                        console.say(describe(demo))
                    if port_file is not None:
                        _write_port_file(port_file, served.port)
                    console.say(f"  MCP endpoint: {served.url}   (both protocol eras)")
                    console.say(f"  control API: {served.base_url}/v1/status   health: /healthz  readiness: /readyz")
                    console.say(f"  operator console: {served.base_url}/ui/   (log in with an operator token)")
                    if insecure_no_auth:
                        console.say("  WARNING: --insecure-no-auth: the control API accepts every request as operator")
                    grants = anonymous_grants(settings)
                    if grants is not None:
                        console.say("  " + ANONYMOUS_WARNING.format(policy=grants.policy, url=served.url))
                    else:
                        console.say("  /mcp requires a session token (POST /v1/sessions, or sessions: in the config)")
                    if served.oauth is not None and served.oauth.resource_metadata_url is not None:
                        console.say(
                            f"  /mcp and /v1 accept access tokens; metadata: {served.oauth.resource_metadata_url}"
                        )
                    console.say(f"  revision {engine.current_revision}: {len(tools)} tools {tools}")
                    console.say("  SIGHUP reloads the config; Ctrl-C (or SIGTERM) stops.")

                    def on_publish(new: object, old: object) -> None:
                        console.say(f"  published revision {engine.current_revision}")

                    engine.add_listener(on_publish)

                    async def reloads() -> None:
                        nonlocal reload
                        while True:
                            await reload.wait()
                            reload = anyio.Event()  # SIGHUPs during a reload coalesce into one more
                            try:
                                out = await engine.refresh(["config"])
                            except Exception as exc:  # a timeout, or the engine closing: never fatal
                                log.warning("SIGHUP: reload did not finish: %s", type(exc).__name__)
                                continue
                            console.say(f"  SIGHUP: reload cycle {out.status}, revision {out.revision}")

                    async with anyio.create_task_group() as inner:
                        inner.start_soon(reloads)
                        await stop.wait()
                        inner.cancel_scope.cancel()
            tg.cancel_scope.cancel()
    return 0


@contextlib.contextmanager
def _sole_error() -> Iterator[None]:
    """Re-raise the one error of a task group as itself (the CLI maps ``ConfigError`` and
    ``OSError`` to exit codes and messages; a group would surface as a traceback)."""
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


async def run_stdio(config_path: str | Path | None, view: str | None = None) -> int:
    """One downstream session over this process's stdin/stdout (logs go to stderr);
    ``config_path=None`` serves the bundled demo. SIGTERM and SIGINT end the session and stop the
    gateway the same way stdin's end does (I14), exit 0. stdio is a local, single-user
    transport: its caller is the process owner (``local::<user>``), needs no token, gets
    ``gateway.grant_policy`` and may use the control tools when they are exposed. ``view``: serve
    that named view (``views:``, ADR 0026) instead of the whole catalog; a view the config does not
    declare is an error (exit 2)."""
    if config_path is None:
        with bundled_demo() as demo:
            print(describe(demo).strip(), file=sys.stderr, flush=True)  # stdout carries the protocol
            return await _stdio(demo.config, view)
    return await _stdio(Path(config_path), view)


async def _stdio(config_path: Path, view: str | None = None) -> int:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals, _sole_error():
        async with Gateway(config_path) as gw:
            loaded = gw.desired.last_good
            curation = loaded.curation if loaded is not None else None
            if view is not None and (curation is None or curation.view(view) is None):
                declared = ", ".join(v.name for v in curation.views) if curation is not None else ""
                declared = declared or "none"
                print(f"mcp-reconciler: no view named {view!r} in the config (declared: {declared})", file=sys.stderr)
                return 2
            front = _front(gw, view)
            line_bytes = (gw.settings or GatewaySettings()).limits.body_bytes  # a line is a body (I18)
            async with anyio.create_task_group() as tg:

                async def on_signals() -> None:
                    async for signum in signals:
                        log.info("received %s: stopping", signal.Signals(signum).name)
                        tg.cancel_scope.cancel()

                await tg.start(front.run)
                tg.start_soon(on_signals)
                # stdin read on the event loop, so a signal can stop an idle session (stdio_input.py)
                with stdio_wire(line_bytes) as (lines, write):
                    await StdioPlane(front).serve(lines, write)
                tg.cancel_scope.cancel()
    return 0
