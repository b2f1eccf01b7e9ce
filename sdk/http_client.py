"""An HTTP client for MCP over streamable HTTP, configured as the ``mcp`` SDK's transports
configure their own: 30 s to connect, write and wait for a pooled connection, 300 s to read (a
server may hold a response stream open), redirects not followed (the SDK's transports follow
them within the endpoint's origin themselves).

Built here from public ``httpx2`` names: the SDK's own factory lives in a private module
(``mcp.shared._httpx_utils``), which the package never reaches
(``tests/unit/test_plane_layering.py``). The pinned runs (``sdk/client.py``) and the tests use it
where a client must send headers of its own (a session token, a pinned revision)."""

from __future__ import annotations

import httpx2

#: Connect, write and pool timeout, in seconds (the SDK's ``MCP_DEFAULT_TIMEOUT``).
TIMEOUT_S = 30.0
#: Read timeout, in seconds: long enough for a held-open SSE stream (``MCP_DEFAULT_SSE_READ_TIMEOUT``).
READ_TIMEOUT_S = 300.0


def mcp_http_client(headers: dict[str, str] | None = None, auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` with the MCP transports' timeouts, sending ``headers`` on every
    request (and authenticating with ``auth``, if given). Use it as an async context manager."""
    return httpx2.AsyncClient(
        headers=headers,
        auth=auth,
        timeout=httpx2.Timeout(TIMEOUT_S, read=READ_TIMEOUT_S),
    )
