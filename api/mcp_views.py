"""Named views over HTTP: ``/mcp/<view>`` (ADR 0026).

A view is a projection of the one catalog (``reconciler/curation.py``); its endpoint is the same
MCP endpoint as ``/mcp`` — the same SDK session manager, the same credential check
(``api/mcp_auth.py``), both protocol eras — with the view's name put in the ASGI scope under
:data:`VIEW_KEY`. :class:`ViewGate` runs after the credential check and before the SDK:

- a view the current catalog does not have → **404** (``unknown_view``);
- a session token whose session is bound to another view, or to none → **403**
  (``wrong_view``): a session of one view never reaches another view's names by changing the
  URL. (A session bound to a view may still use ``/mcp``: what it sees is its view either way.)

The front door (``api/frontdoor/sessions.py``) reads :data:`VIEW_KEY` when it binds a request:
sessions it creates for callers without a session of their own (anonymous, OAuth subjects) are
bound to the view, and a legacy connection opened on one view is refused on another."""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_reconciler.api.mcp_auth import IDENTITY_KEY, McpIdentity
from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.authority import Authority

__all__ = ["VIEW_KEY", "ViewGate", "request_view"]

#: Where the view a request was addressed to lives in the ASGI scope (absent: ``/mcp``).
VIEW_KEY = "mcp_reconciler.view"

_refusals = telemetry.meter.create_counter(
    "frontdoor.views.refused", description="/mcp/<view> requests refused, by reason (unknown_view, wrong_view)"
)


def request_view(scope: Scope) -> str | None:
    """The view ``scope``'s request was addressed to, or ``None`` for ``/mcp``."""
    view = scope.get(VIEW_KEY)
    return view if isinstance(view, str) else None


class ViewGate:
    """ASGI middleware for ``/mcp/{view}`` (module docstring). ``has_view(name)`` says whether the
    current catalog has that view (asked per request: a reload that adds or removes a view applies
    at once)."""

    def __init__(self, app: ASGIApp, *, authority: Authority, has_view: Callable[[str], bool]) -> None:
        self.app = app
        self.authority = authority
        self.has_view = has_view

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Admit a request to an existing view, for a caller that may use it (module docstring)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        view = str((scope.get("path_params") or {}).get("view", ""))
        if not self.has_view(view):
            await _refuse(send, 404, "unknown_view", "there is no view by that name")
            return
        identity = scope.get(IDENTITY_KEY)
        if isinstance(identity, McpIdentity) and identity.session_id is not None:
            session = self.authority.get(identity.session_id)
            if session is not None and session.view != view:
                await _refuse(send, 403, "wrong_view", "this session belongs to another view")
                return
        scope[VIEW_KEY] = view
        await self.app(scope, receive, send)


async def _refuse(send: Send, status: int, error: str, description: str) -> None:
    _refusals.add(1, {"reason": error})
    raw = json.dumps({"error": error, "error_description": description}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": raw})
