"""Small helpers for downstream MCP calls in tests."""

from __future__ import annotations

from typing import Any

from mcp import Client, MCPError

from mcp_reconciler.api.frontdoor import REVISION_META


def revision_of(result: Any) -> int:
    """The gateway revision a result says it came from."""
    rev = (result.meta or {}).get(REVISION_META)
    assert isinstance(rev, int), result
    return rev


async def call_error(client: Client, name: str, args: dict[str, Any] | None = None, **kw: Any) -> MCPError:
    """The MCPError a call fails with (fails the test if the call succeeds)."""
    try:
        result = await client.call_tool(name, args or {}, **kw)
    except MCPError as exc:
        return exc
    raise AssertionError(f"{name} succeeded: {result}")
