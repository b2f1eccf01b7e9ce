"""Serve a low-level ``Server`` over stdio as a 2025-11-25-only server (like most servers in the
wild, e.g. TypeScript SDK servers): ``server/discover`` is answered "method not found" before the
SDK sees it, so an auto-mode client falls back to the ``initialize`` handshake. (A 2.3 Python
server otherwise decides the era from the first request and would lock the connection modern.)"""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types.jsonrpc import ErrorData, JSONRPCError, JSONRPCRequest


async def serve_stdio_legacy_only(server: Any, pid_file: str | None, write_pid_file: Any) -> None:
    """Like ``upstream_server.serve_stdio``, refusing ``server/discover`` on the way in."""
    async with stdio_server() as (read, write):
        send, receive = anyio.create_memory_object_stream[Any](64)

        async def filter_discover() -> None:
            async with send:
                async for item in read:
                    msg = item.message if isinstance(item, SessionMessage) else None
                    if isinstance(msg, JSONRPCRequest) and msg.method == "server/discover":
                        error = ErrorData(code=-32601, message="Method not found")
                        await write.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=msg.id, error=error)))
                        continue
                    await send.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(filter_discover)
            write_pid_file(pid_file)
            await server.run(receive, write, server.create_initialization_options())
            tg.cancel_scope.cancel()
