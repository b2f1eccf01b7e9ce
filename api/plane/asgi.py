"""The entry of the gateway's data plane: one ASGI app for ``/mcp``, the edge pipeline in front
(``pipeline``), the request's era chosen by its ``MCP-Protocol-Version`` header, one dispatcher
behind (``dispatch``).

Status (issue 26, ADR 0035): the 2026-07-28 era is served (``era2026``); a request of the
handshake era (2025-11-25: no version header, or a handshake version) is answered
``400 UNSUPPORTED_PROTOCOL_VERSION``-style until ``era2025`` lands. The plane is built only by
tests and the benchmark — ``/mcp`` in production is still the SDK-based plane
(``api/http_app.py``), so there is never a second live path."""

from __future__ import annotations

from starlette.types import Receive, Scope, Send

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.plane import jsonrpc, pipeline
from mcp_reconciler.api.plane.dispatch import Dispatcher
from mcp_reconciler.api.plane.era2026 import Era2026, is_modern

#: The error a handshake-era request gets while ``era2025`` is not on the plane.
LEGACY_NOT_SERVED = "this endpoint serves protocol 2026-07-28 only (send MCP-Protocol-Version: 2026-07-28)"


class Plane:
    """``/mcp`` on the gateway's own plane (module docstring); other paths are 404."""

    def __init__(self, front: FrontDoor) -> None:
        self.dispatcher = Dispatcher(front)
        self.era2026 = Era2026(front, self.dispatcher)

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
        if scope["type"] != "http" or scope.get("path") != "/mcp":
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
            return
        if is_modern(scope):
            await self.era2026(scope, receive, send)
            return
        message = {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": LEGACY_NOT_SERVED}}
        body = jsonrpc.encode(message)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 400, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def build_plane(front: FrontDoor, policy: pipeline.EdgePolicy) -> pipeline.Pipeline:
    """The plane for ``front`` behind the edge ``policy``; run ``front.run`` beside it."""
    return pipeline.build(Plane(front), policy)
