"""Raw streamable-HTTP MCP requests (httpx2), for tests where the HTTP status, a header or the
exact transport session matters — things the SDK client hides behind an exception."""

from __future__ import annotations

import json
from typing import Any

import httpx2

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def rpc(method: str, params: dict[str, Any] | None = None, id_: int | None = 1) -> dict[str, Any]:
    """One JSON-RPC message (a notification when ``id_`` is ``None``)."""
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    if id_ is not None:
        msg["id"] = id_
    return msg


def messages(response: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response: a JSON body, or every ``data:`` line of an SSE body."""
    if response.headers.get("content-type", "").startswith("application/json"):
        body = response.json()
        return body if isinstance(body, list) else [body]
    out = []
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            out.append(json.loads(line[5:]))
    return out


def legacy_initialize(capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    """A 2025-11-25 ``initialize`` request (id 1)."""
    client = {"name": "raw", "version": "0"}
    return rpc("initialize", {"protocolVersion": LEGACY, "capabilities": capabilities or {}, "clientInfo": client})


#: The handshake's second message (a notification).
INITIALIZED = rpc("notifications/initialized", id_=None)


def legacy_headers(session_id: str | None = None, headers: dict[str, str] | None = None) -> httpx2.Headers:
    """The headers of a 2025-11-25 request: :data:`ACCEPT` and ``headers`` (which win, whatever
    their case), and on an open session its id and protocol version."""
    out = httpx2.Headers(ACCEPT)
    out.update(headers or {})
    if session_id is not None:
        out.update({"mcp-session-id": session_id, "mcp-protocol-version": LEGACY})
    return out


async def legacy_open(
    http: httpx2.AsyncClient,
    url: str,
    headers: dict[str, str] | None = None,
    capabilities: dict[str, Any] | None = None,
) -> httpx2.Response:
    """``initialize`` + ``notifications/initialized`` of a 2025-11-25 session; returns the
    initialize response (its ``mcp-session-id`` header names the transport session)."""
    response = await http.post(url, json=legacy_initialize(capabilities), headers=legacy_headers(None, headers))
    sid = response.headers.get("mcp-session-id")
    if response.status_code == 200 and sid:
        done = await http.post(url, json=INITIALIZED, headers=legacy_headers(sid, headers))
        assert done.status_code == 202, done.text
    return response


async def legacy_request(
    http: httpx2.AsyncClient,
    url: str,
    session_id: str,
    method: str,
    params: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> httpx2.Response:
    """One request on an open 2025-11-25 session."""
    return await http.post(
        url, json=rpc(method, params if params is not None else {}, id_=7), headers=legacy_headers(session_id, headers)
    )


def tool_names(response: httpx2.Response) -> set[str]:
    """The tool names of a ``tools/list`` response."""
    (msg,) = [m for m in messages(response) if "result" in m or "error" in m]
    assert "result" in msg, msg
    return {t["name"] for t in msg["result"]["tools"]}
