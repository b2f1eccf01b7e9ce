"""Named views over HTTP: ``/mcp/<view>`` (ADR 0026).

A view is a projection of the one catalog (``reconciler/curation.py``); its endpoint is the same
MCP endpoint as ``/mcp`` — the same data plane, the same credential check
(``api/mcp_auth.py``), both protocol eras — with the view's name put in the ASGI scope under
:data:`VIEW_KEY`. :class:`ViewGate` is the edge pipeline's step after the credentials:

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

from starlette.types import Scope

from mcp_reconciler.api.http_limits import Refusal
from mcp_reconciler.api.mcp_auth import McpIdentity
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
    """The view step of ``/mcp/{view}`` (module docstring), after the credentials. ``has_view(name)``
    says whether the current catalog has that view (asked per request: a reload that adds or
    removes a view applies at once)."""

    def __init__(self, *, authority: Authority, has_view: Callable[[str], bool]) -> None:
        self.authority = authority
        self.has_view = has_view

    def check(self, scope: Scope, view: str, identity: McpIdentity) -> Refusal | None:
        """Admit ``identity``'s request to ``view`` (put into ``scope`` under :data:`VIEW_KEY`),
        or refuse it: 404 for a view the catalog does not have, 403 for another view's session."""
        if not self.has_view(view):
            return _refusal(404, "unknown_view", "there is no view by that name")
        if identity.session_id is not None:
            session = self.authority.get(identity.session_id)
            if session is not None and session.view != view:
                return _refusal(403, "wrong_view", "this session belongs to another view")
        scope[VIEW_KEY] = view
        return None


def _refusal(status: int, error: str, description: str) -> Refusal:
    _refusals.add(1, {"reason": error})
    return Refusal.json(status, json.dumps({"error": error, "error_description": description}).encode())
