"""The entry of the gateway's data plane and the app the listener runs: ``/mcp`` and the named
views ``/mcp/<view>`` (ADR 0026) are routed by path first, pass the edge pipeline's steps
(``pipeline``: called in order, none wrapping the next), then the request's era chosen by its
``MCP-Protocol-Version`` header, one dispatcher behind (``dispatch``). Nothing of Starlette and
none of the other paths' wrappers is on ``/mcp``'s way.

Both eras are served: 2026-07-28 (``era2026``) and the handshake era (2025-11-25: no version
header, or a handshake version; ``era2025``). ``api/http_app.py`` builds it for ``serve``
(ADR 0035): the one live ``/mcp``."""

from __future__ import annotations

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.lifecycle import Drain
from mcp_reconciler.api.mcp_views import ViewGate
from mcp_reconciler.api.plane import pipeline
from mcp_reconciler.api.plane.dispatch import Dispatcher
from mcp_reconciler.api.plane.era2025 import Era2025
from mcp_reconciler.api.plane.era2026 import Era2026, is_modern
from mcp_reconciler.api.plane.sessions import SessionTable


class Plane:
    """The listener's ASGI app (module docstring): ``/mcp`` and ``/mcp/<view>`` through the edge
    ``pipeline`` to their era's handler, routed by path before anything else; every other path
    (and lifespan) to ``rest`` — the Starlette side with its own edge (``api/http_app.py``) — or
    404 without one."""

    def __init__(
        self,
        front: FrontDoor,
        table: SessionTable,
        policy: pipeline.EdgePolicy,
        rest: ASGIApp | None = None,
        drain: Drain | None = None,
    ) -> None:
        self._front = front
        # /mcp/<view> (ADR 0026): the view must exist and the caller may use it (api/mcp_views.py).
        views = ViewGate(authority=front.authority, has_view=self._has_view)
        self.pipeline = pipeline.Pipeline(policy, views, drain)
        self.rest = rest
        self.dispatcher = Dispatcher(front)
        self.era2026 = Era2026(front, self.dispatcher)
        self.era2025 = Era2025(front, self.dispatcher, table)
        front.gate_pushes(table)  # legacy pushes wait for the session's GET stream

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The plane's own background work (idle reaping of 2025-era sessions); run it beside
        ``front.run`` for the plane's lifetime; cancelling it ends every session (I14)."""
        await self.era2025.run(task_status=task_status)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Route one ASGI call (module docstring)."""
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == "/mcp" or path.startswith("/mcp/"):
            view = path[5:] if len(path) > 4 else None
            unknown = view is not None and (not view or "/" in view)
            admitted = await self.pipeline.admit(scope, receive, send, None if unknown else view)
            if admitted is None:
                return  # refused (and answered) at the edge, or the client left
            if unknown:
                await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
                await send({"type": "http.response.body", "body": b""})
            elif is_modern(scope):
                await self.era2026(scope, receive, send, admitted.body)
            else:
                await self.era2025(scope, receive, send, admitted.identity, admitted.body)
        elif self.rest is not None:
            await self.rest(scope, receive, send)
        elif scope["type"] == "lifespan":  # nothing of the plane's to start
            while True:
                event = await receive()
                if event["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif event["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        else:
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})

    def _has_view(self, name: str) -> bool:
        live = self._front.catalog.current()
        return live is not None and name in live.generation.catalog.views


def build_plane(
    front: FrontDoor,
    policy: pipeline.EdgePolicy,
    *,
    rest: ASGIApp | None = None,
    drain: Drain | None = None,
    max_sessions: int = 4096,
    max_sessions_per_client: int = 256,
    session_idle_s: float = 300.0,
) -> Plane:
    """The plane for ``front`` behind the edge ``policy`` (2025-era sessions bounded in total and
    per principal, closed after ``session_idle_s`` idle: ``gateway.limits``), other paths to
    ``rest``, new requests refused once ``drain`` is closed; run ``front.run`` and the plane's
    ``run`` beside it. The plane takes ``front``'s push gate: one HTTP layer per front door."""
    return Plane(
        front,
        SessionTable(
            max_sessions=max_sessions,
            max_per_client=max_sessions_per_client,
            idle_s=session_idle_s,
            on_close=front.sessions.connection_closed,
        ),
        policy,
        rest,
        drain,
    )
