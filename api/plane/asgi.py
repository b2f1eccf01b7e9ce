"""The entry of the gateway's data plane: one ASGI app for ``/mcp`` and the named views
``/mcp/<view>`` (ADR 0026), the edge pipeline in front (``pipeline``), the request's era chosen
by its ``MCP-Protocol-Version`` header, one dispatcher behind (``dispatch``).

Both eras are served: 2026-07-28 (``era2026``) and the handshake era (2025-11-25: no version
header, or a handshake version; ``era2025``). ``api/http_app.py`` builds it for ``serve``
(ADR 0035): the one live ``/mcp``."""

from __future__ import annotations

import anyio
from starlette.types import Receive, Scope, Send

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.mcp_views import ViewGate
from mcp_reconciler.api.plane import pipeline
from mcp_reconciler.api.plane.dispatch import Dispatcher
from mcp_reconciler.api.plane.era2025 import Era2025
from mcp_reconciler.api.plane.era2026 import Era2026, is_modern
from mcp_reconciler.api.plane.sessions import SessionTable


class Plane:
    """``/mcp`` and ``/mcp/<view>`` on the gateway's own plane (module docstring); other paths
    are 404."""

    def __init__(self, front: FrontDoor, table: SessionTable) -> None:
        self._front = front
        # /mcp/<view> (ADR 0026): the view must exist and the caller may use it (api/mcp_views.py).
        self._views = ViewGate(self._era, authority=front.authority, has_view=self._has_view)
        self.dispatcher = Dispatcher(front)
        self.era2026 = Era2026(front, self.dispatcher)
        self.era2025 = Era2025(front, self.dispatcher, table)
        front.gate_pushes(table)  # legacy pushes wait for the session's GET stream

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The plane's own background work (idle reaping of 2025-era sessions); run it beside
        ``front.run`` for the plane's lifetime; cancelling it ends every session (I14)."""
        await self.era2025.run(task_status=task_status)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Route one ASGI call (lifespan events are acknowledged: the plane holds no state to start)."""
        if scope["type"] == "lifespan":
            while True:
                event = await receive()
                if event["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif event["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        path = str(scope.get("path", ""))
        view = path.removeprefix("/mcp/") if path.startswith("/mcp/") else None
        if scope["type"] == "http" and path == "/mcp":
            await self._era(scope, receive, send)
        elif scope["type"] == "http" and view and "/" not in view:
            scope["path_params"] = {"view": view}
            await self._views(scope, receive, send)
        else:
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})

    async def _era(self, scope: Scope, receive: Receive, send: Send) -> None:
        if is_modern(scope):
            await self.era2026(scope, receive, send)
        else:
            await self.era2025(scope, receive, send)

    def _has_view(self, name: str) -> bool:
        live = self._front.catalog.current()
        return live is not None and name in live.generation.catalog.views


def build_plane(
    front: FrontDoor,
    policy: pipeline.EdgePolicy,
    *,
    max_sessions: int = 4096,
    max_sessions_per_client: int = 256,
    session_idle_s: float = 300.0,
) -> tuple[pipeline.Pipeline, Plane]:
    """The plane for ``front`` behind the edge ``policy`` (2025-era sessions bounded in total and
    per principal, closed after ``session_idle_s`` idle: ``gateway.limits``); run ``front.run``
    and the returned plane's ``run`` beside it. The plane takes ``front``'s push gate: one HTTP
    layer per front door."""
    plane = Plane(
        front,
        SessionTable(max_sessions=max_sessions, max_per_client=max_sessions_per_client, idle_s=session_idle_s),
    )
    return pipeline.build(plane, policy), plane
