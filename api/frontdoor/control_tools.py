"""The built-in control tools (``gateway_status``, ``gateway_refresh``), for MCP clients that
cannot reach the control API. Exposed only when the config sets ``expose_control_tools``, and
then only to callers allowed to use them (``FrontDoor.may_use_control_tools``: the local stdio
user, or a session given the ``control_tools`` flag by an operator or the config); to everyone
else they do not exist (not listed; a call answers "unknown tool", like any ungranted name).
They are listed before the catalog's tools and answered by the gateway itself, never forwarded.

``gateway_status`` answers what the caller's role may read (I12): the operator's full status to
the local user, the owner view (``api/views.py::owner_view``: no config paths in
``config_error`` or ``warnings``) to a session."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp import MCPError

from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.revisions import REVISION_META

#: ``status(operator)``: the status as JSON data, the operator's full view or the owner view.
StatusFn = Callable[[bool], Awaitable[dict[str, Any]]]
RefreshFn = Callable[[], Awaitable[int | None]]

CONTROL_TOOLS: list[types.Tool] = [
    types.Tool(
        name="gateway_status",
        description="mcp-reconciler provenance: revision, freshness, sources, warnings (built in).",
        input_schema={"type": "object"},
    ),
    types.Tool(
        name="gateway_refresh",
        description="Reconcile every source now and return the resulting revision (built in).",
        input_schema={"type": "object"},
    ),
]
CONTROL_NAMES = frozenset(t.name for t in CONTROL_TOOLS)


class ControlTools:
    """Answers the control tools: ``gateway_status`` returns ``status(operator)``,
    ``gateway_refresh`` returns ``{"revision": refresh()}``, both as JSON text with the current
    revision in ``_meta``. A tool whose function was not given answers ``unknown_name``. The
    caller's right to use them is checked by the front door before :meth:`call`."""

    tools = CONTROL_TOOLS
    names = CONTROL_NAMES

    def __init__(self, catalog: CatalogAccess, *, status: StatusFn | None, refresh: RefreshFn | None) -> None:
        self._catalog = catalog
        self._status = status
        self._refresh = refresh

    async def call(self, name: str, *, operator: bool = False) -> types.CallToolResult:
        """The result of control tool ``name`` for a caller allowed to use it; ``operator``
        selects the full status over the owner view."""
        if name == "gateway_status" and self._status is not None:
            body: Any = await self._status(operator)
        elif name == "gateway_refresh" and self._refresh is not None:
            body = {"revision": await self._refresh()}
        else:
            raise MCPError(-32602, f"unknown tool: {name}", {"code": "unknown_name"})
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(body, default=str))],
            _meta={REVISION_META: self._catalog.current_revision},
        )
