"""What ``serve`` adds to be observed in production (ADR 0031): ``/metrics``, its optional
listener of its own, OTLP export and the audit trail, started and stopped with the gateway.

- ``GET /metrics`` on the main listener: the Prometheus text of every instrument
  (``reconciler/prometheus.py``), for an operator token sent as a bearer token (401 without a
  valid one, 403 for an owner's). ``telemetry.metrics: false`` removes the route.
- ``telemetry.metrics_listen: host:port``: a second listener serving only ``GET /metrics``,
  without auth, loopback unless ``metrics_listen_public`` (the config refuses otherwise, and
  startup says so loudly when it is public). It holds at most :data:`LISTENER_CONNECTIONS`
  connections, reads at most :data:`LISTENER_HEAD_BYTES` of a request head within
  :data:`LISTENER_READ_S` (I18), and answers one request per connection.
- OTLP: ``telemetry.otlp_endpoint`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` (``api/otel.py``).
- The audit trail (``telemetry.audit``): ``reconciler/audit.py`` installed for the block.
- The state gauges (sources, revision, retiring generations, sessions by era and policy) read
  this gateway while the block runs. In a cluster every series carries ``replica``."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from mcp_reconciler.api import otel
from mcp_reconciler.api.auth import PRINCIPAL_KEY, Authenticator, Principal
from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.reconciler import audit, telemetry
from mcp_reconciler.reconciler.config import TelemetryConfig
from mcp_reconciler.reconciler.engine import Engine
from mcp_reconciler.reconciler.prometheus import CONTENT_TYPE
from mcp_reconciler.reconciler.runtime import LiveState

log = logging.getLogger("mcp_reconciler.observability")

LISTENER_CONNECTIONS = 16
LISTENER_HEAD_BYTES = 8192
LISTENER_READ_S = 5.0
SOURCE_STATES = ("ready", "stale", "failed", "connecting")


class GatewayGauges:
    """The state gauges (``reconciler/telemetry.py::STATE_GAUGES``) of one served gateway."""

    def __init__(self, engine: Engine, front: FrontDoor) -> None:
        self._engine = engine
        self._front = front

    def gauges(self) -> dict[str, Iterable[telemetry.Reading]]:
        """The current readings, by gauge name."""
        now = time.time()
        health = self._engine.source_health()
        states = [
            (1.0 if h.status == state else 0.0, {"source": h.source, "state": state})
            for h in health
            for state in SOURCE_STATES
        ]
        ages = [(now - h.last_ok_at, {"source": h.source}) for h in health if h.last_ok_at is not None]
        live = self._engine.live()
        current = self._engine.current_revision
        sessions = Counter((b.era, b.session.policy.value) for b in list(self._front.bindings.values()))
        return {
            "reconciler.source.state": states,
            "reconciler.source.consecutive_failures": [
                (float(h.consecutive_failures), {"source": h.source}) for h in health
            ],
            "reconciler.source.last_success_age": ages,
            "reconciler.revision": [(float(current), {})] if current is not None else [],
            "reconciler.generations.retiring": [(float(sum(1 for g in live if g.state is LiveState.RETIRING)), {})],
            "frontdoor.sessions": [
                (float(n), {"era": era, "policy": policy}) for (era, policy), n in sorted(sessions.items())
            ],
        }


class LimitGauges:
    """``gateway.limits.hits``: every I18 bound an outsider hit, read from the parts that keep
    the counts (the connection guard, the body limit, the transport sessions, the metrics
    listener) — nothing on the request path counts twice. Upstream message bytes refused are
    ``reconciler.upstream.messages_refused``."""

    def __init__(self, guard: Any, bodies: Iterable[Any], sessions: Any, obs: Observability) -> None:
        self._guard, self._bodies, self._sessions, self._obs = guard, tuple(bodies), sessions, obs

    def gauges(self) -> dict[str, Iterable[telemetry.Reading]]:
        """The cumulative hits, by bound."""
        g = self._guard
        counts = {
            "connections": g.refused + g.evicted,
            "header_bytes": g.oversized,
            "header_timeout": g.timed_out,
            "body_bytes": sum(body.refused for body in self._bodies),
            "transport_sessions": self._sessions.refused_total,
            "transport_sessions_per_client": self._sessions.refused_per_client,
            **self._obs.hits,
        }
        return {"gateway.limits.hits": [(float(n), {"bound": bound}) for bound, n in sorted(counts.items())]}


@dataclass
class Observability:
    """The running telemetry of one ``serve``: the reader ``/metrics`` renders, the audit log
    (if on), and the metrics listener's port (if any)."""

    config: TelemetryConfig
    auth: Authenticator
    reader: Any = None
    audit_log: audit.AuditLog | None = None
    metrics_port: int | None = None
    hits: Counter[str] = field(default_factory=Counter)  # the metrics listener's own bound hits

    def routes(self) -> list[BaseRoute]:
        """``/metrics`` for the main listener (none with ``telemetry.metrics: false``)."""
        return [Route("/metrics", endpoint=self.metrics, methods=["GET"])] if self.config.metrics else []

    def scrape(self) -> str:
        """The exposition text now (empty without a reader of ours)."""
        return self.reader.scrape() if self.reader is not None else ""

    async def metrics(self, request: Request) -> Response:
        """``GET /metrics``: operators only (a bearer token)."""
        principal = request.scope.get(PRINCIPAL_KEY)
        if not isinstance(principal, Principal):
            principal = self.auth.authenticate(request.headers.get("authorization"))
        if principal is None:
            audit.record("credential.refused", reason="invalid", status=401, outcome="refused", detail="/metrics")
            return PlainTextResponse(
                "a valid operator bearer token is required\n",
                status_code=401,
                headers={"www-authenticate": "Bearer"},
            )
        if principal.role != "operator":
            return PlainTextResponse("/metrics needs the operator role\n", status_code=403)
        return PlainTextResponse(self.scrape(), media_type=CONTENT_TYPE)


@contextlib.asynccontextmanager
async def observed(
    engine: Engine,
    front: FrontDoor,
    auth: Authenticator,
    config: TelemetryConfig,
    *,
    config_dir: Path,
    replica: str | None = None,
) -> AsyncIterator[Observability]:
    """Start the telemetry of one gateway for the block (module docstring)."""
    endpoint = config.otlp_endpoint or os.environ.get(otel.OTLP_ENV) or None
    reader = None
    if config.metrics or config.metrics_listen is not None or endpoint or otel.installed() is not None:
        reader = otel.install(otlp_endpoint=endpoint).reader
    # else: nothing to export to: the instruments stay the API's no-ops (no per-call cost)
    obs = Observability(config, auth, reader=reader)
    async with contextlib.AsyncExitStack() as stack:
        if obs.reader is not None and replica is not None:
            # Every series carries the replica (the reader is the process's: forgotten on exit).
            obs.reader.const_labels["replica"] = replica
            stack.callback(obs.reader.const_labels.pop, "replica", None)
        stack.enter_context(telemetry.state_gauges.observing(GatewayGauges(engine, front)))
        if config.audit is not None:
            sink = audit.open_sink(
                config.audit.path, base=config_dir, max_bytes=config.audit.max_bytes, keep=config.audit.keep
            )
            trail = audit.AuditLog(
                sink, queue_max=config.audit.queue, replica=replica, argument_digest=config.audit.argument_digest
            )
            obs.audit_log = stack.enter_context(audit.installed(trail))
            log.info("audit trail: %s", config.audit.path)
        if config.metrics_listen is not None:
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)
            obs.metrics_port = await tg.start(_listen, config.metrics_listen, obs)
            if config.metrics_listen_public:
                log.warning(
                    "metrics listener on %s is NOT loopback (telemetry.metrics_listen_public): anyone who can "
                    "reach it reads the metrics without a token",
                    config.metrics_listen,
                )
        yield obs


async def _listen(
    address: str, obs: Observability, *, task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED
) -> None:
    host, _, port = address.rpartition(":")
    listener = await anyio.create_tcp_listener(local_host=host.strip("[]"), local_port=int(port))
    bound = listener.extra(anyio.abc.SocketAttribute.local_port)
    slots = anyio.CapacityLimiter(LISTENER_CONNECTIONS)

    async def handle(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            try:
                slots.acquire_nowait()
            except anyio.WouldBlock:
                obs.hits["metrics_connections"] += 1
                return  # over the bound: closed at once
            try:
                await _answer(stream, obs)
            finally:
                slots.release()

    async with listener:
        task_status.started(bound)
        await listener.serve(handle)


async def _answer(stream: anyio.abc.SocketStream, obs: Observability) -> None:
    head = b""
    with anyio.move_on_after(LISTENER_READ_S):
        while b"\r\n\r\n" not in head and len(head) <= LISTENER_HEAD_BYTES:
            try:
                head += await stream.receive(LISTENER_HEAD_BYTES)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return
    end = head.find(b"\r\n\r\n")
    if end < 0 or end + 4 > LISTENER_HEAD_BYTES:
        if len(head) > LISTENER_HEAD_BYTES:
            obs.hits["metrics_headers"] += 1
            await _reply(stream, 431, "text/plain", b"request head too large\n")
        return  # timed out, or the peer went away: closed
    request_line = head.split(b"\r\n", 1)[0].split()
    if len(request_line) < 2 or request_line[0] not in (b"GET", b"HEAD"):
        await _reply(stream, 405, "text/plain", b"only GET /metrics\n")
        return
    if request_line[1].split(b"?", 1)[0] != b"/metrics":
        await _reply(stream, 404, "text/plain", b"only GET /metrics\n")
        return
    body = obs.scrape().encode()
    await _reply(stream, 200, CONTENT_TYPE, b"" if request_line[0] == b"HEAD" else body, length=len(body))


async def _reply(
    stream: anyio.abc.SocketStream, status: int, content_type: str, body: bytes, *, length: int | None = None
) -> None:
    reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 431: "Request Header Fields Too Large"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body) if length is None else length}\r\nconnection: close\r\n\r\n"
    )
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.send(head.encode() + body)
