"""The built-in control tools (``gateway_status``, ``gateway_refresh``), for MCP clients that
cannot reach the control API. Exposed only when the config sets ``expose_control_tools``; they
are listed before the catalog's tools and answered by the gateway itself, never forwarded."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp import MCPError

from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.revisions import REVISION_META

StatusFn = Callable[[], Awaitable[dict[str, Any]]]
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
    """Answers the control tools: ``gateway_status`` returns ``status()``, ``gateway_refresh``
    returns ``{"revision": refresh()}``, both as JSON text with the current revision in
    ``_meta``. A tool whose function was not given answers ``unknown_name``."""

    tools = CONTROL_TOOLS
    names = CONTROL_NAMES

    def __init__(self, catalog: CatalogAccess, *, status: StatusFn | None, refresh: RefreshFn | None) -> None:
        self._catalog = catalog
        self._status = status
        self._refresh = refresh

    async def call(self, name: str) -> types.CallToolResult:
        """The result of control tool ``name``."""
        if name == "gateway_status" and self._status is not None:
            body: Any = await self._status()
        elif name == "gateway_refresh" and self._refresh is not None:
            body = {"revision": await self._refresh()}
        else:
            raise MCPError(-32602, f"unknown tool: {name}", {"code": "unknown_name"})
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(body, default=str))],
            _meta={REVISION_META: self._catalog.current_revision},
        )
