"""The gateway's own MCP data plane (issue 26, ADR 0035), written on ASGI with the ``mcp`` SDK
used for types and protocol rules only (public names; ``tests/unit/test_plane_layering.py``
fails on any private ``mcp`` name here).

One concept per module, in the order a request passes them:

- ``asgi``: the entry — ``/mcp`` and ``/mcp/<view>``, the era chosen by ``MCP-Protocol-Version``.
- ``pipeline``: the edge checks in one explicit order (drain I14, Host/Origin, body limit I18,
  credentials I16/OAuth).
- ``era2026``: the 2026-07-28 POST (envelope ladder, ``HeaderMismatch``, JSON or SSE response).
- ``era2025``: the 2025-11-25 handshake era (sessions bound to the principal that opened them,
  SSE responses, the GET stream, DELETE, idle reaping, bounds I18).
- ``stdio``: the same dispatcher on newline-delimited JSON-RPC (both eras).
- ``channel``: the way back to a client (notifications, pushes, the relay's requests and their
  replies), as SSE frames or stdio lines.
- ``jsonrpc``, ``sse``: the wire — one message per body, replies with their HTTP status; frames.
- ``dispatch``: JSON-RPC method → front door operation, one table for every era and transport.

Status: serves ``/mcp`` and ``/mcp/<view>`` for ``mcp-reconciler serve`` (``api/http_app.py``);
``sessions`` holds the 2025 era's session table (ADR 0035)."""
