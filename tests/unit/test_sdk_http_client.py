"""``sdk/http_client.py``: the MCP HTTP client built from public ``httpx2`` names, with the SDK
transports' timeouts, used by pinned runs over a real streamable-HTTP server."""

from __future__ import annotations

import importlib

import pytest

from mcp_reconciler.sdk.http_client import READ_TIMEOUT_S, TIMEOUT_S, mcp_http_client

pytestmark = pytest.mark.anyio


async def test_the_client_has_the_sdk_transport_timeouts_and_sends_its_headers() -> None:
    async with mcp_http_client({"MCP-Reconciler-Revision": "7"}) as http:
        assert http.headers["MCP-Reconciler-Revision"] == "7"
        assert (http.timeout.connect, http.timeout.write, http.timeout.pool) == (TIMEOUT_S,) * 3
        assert http.timeout.read == READ_TIMEOUT_S
        assert not http.follow_redirects  # the SDK's transports follow within the origin themselves


async def test_the_timeouts_are_the_sdks_own() -> None:
    """The SDK's values (in a private module: tests may look, the package may not); a release
    that changes them shows here, and ours follow."""
    module = importlib.import_module("mcp.shared._httpx_utils")
    assert module.MCP_DEFAULT_TIMEOUT == TIMEOUT_S
    assert module.MCP_DEFAULT_SSE_READ_TIMEOUT == READ_TIMEOUT_S
