"""A streamable-HTTP MCP upstream (2025-11-25 era) whose tool answers break the wire on purpose,
for the bounds tests (issue 25): what a gateway must survive from an upstream it does not control.

    python -m tests.support.broken_http --port-file PATH [--pid-file PATH]

It binds port 0 and writes the port it got to ``--port-file`` (before the pid file). It answers
``initialize`` (with an ``Mcp-Session-Id``), ``notifications/initialized``, ``ping``,
``tools/list`` and ``tools/call``; ``server/discover`` is "method not found" (so an ``auto``
client falls back to the 2025 handshake) and ``GET`` (the standalone stream) is 405. Tools —
each answers on an SSE response stream:

- ``ok`` → ``{"ok": true}`` as one well-formed event;
- ``garbage {n}`` → ``n`` lines that are neither SSE fields nor JSON, then ``n`` events whose
  data is not JSON-RPC, then the answer ``{"garbage": n}`` (garbage between messages);
- ``endless {bytes}`` → one event whose ``data:`` line grows by ``bytes`` of ``y`` and never
  ends (no blank line; the stream stays open until the client goes): an SSE event that never
  ends.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.upstream_server import _write_atomically, write_pid_file

PROTOCOL = "2025-11-25"
TOOLS = [
    {"name": "ok", "inputSchema": {"type": "object"}},
    {"name": "garbage", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    {"name": "endless", "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}}}},
]


def _result(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps(message).encode() + b"\n\n"


def _text(data: dict[str, Any]) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": json.dumps(data)}]}


async def _garbage(request_id: Any, n: int) -> AsyncIterator[bytes]:
    for i in range(n):
        yield b"garbage line %d: not an SSE field, not json-rpc\n" % i
    yield b"\n"
    for i in range(n):
        yield b"event: message\ndata: garbage event %d: not json-rpc\n\n" % i
    yield _event(_result(request_id, _text({"garbage": n})))


async def _endless(size: int) -> AsyncIterator[bytes]:
    yield b"event: message\ndata: "
    chunk = b"y" * 65536
    for start in range(0, size, len(chunk)):
        yield chunk[: min(len(chunk), size - start)]
    await anyio.sleep_forever()  # the event never ends; the client goes first


async def mcp(request: Request) -> Response:
    if request.method == "GET":
        return Response(status_code=405)
    if request.method == "DELETE":
        return Response(status_code=200)
    message = json.loads(await request.body())
    method, request_id = message.get("method"), message.get("id")
    if request_id is None:  # a notification
        return Response(status_code=202)
    headers = {"Mcp-Session-Id": request.headers.get("mcp-session-id") or uuid.uuid4().hex}
    if method == "initialize":
        result = {
            "protocolVersion": PROTOCOL,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "broken", "version": "1"},
        }
        return JSONResponse(_result(request_id, result), headers=headers)
    if method == "ping":
        return JSONResponse(_result(request_id, {}), headers=headers)
    if method == "tools/list":
        return JSONResponse(_result(request_id, {"tools": TOOLS}), headers=headers)
    if method == "tools/call":
        name, args = message["params"]["name"], message["params"].get("arguments") or {}
        body: AsyncIterator[bytes]
        if name == "garbage":
            body = _garbage(request_id, int(args.get("n", 3)))
        elif name == "endless":
            body = _endless(int(args.get("bytes", 0)))
        else:

            async def one() -> AsyncIterator[bytes]:
                yield _event(_result(request_id, _text({"ok": True})))

            body = one()
        return StreamingResponse(body, media_type="text/event-stream", headers=headers)
    error = {"code": -32601, "message": "Method not found"}
    return JSONResponse({"jsonrpc": "2.0", "id": request_id, "error": error}, headers=headers)


async def serve(port_file: str, pid_file: str | None) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections queue from now on: the port can be reported before uvicorn runs
    app = Starlette(routes=[Route("/mcp", endpoint=mcp, methods=["GET", "POST", "DELETE"])])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: server.serve(sockets=[sock]))
        _write_atomically(port_file, str(sock.getsockname()[1]))
        write_pid_file(pid_file)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.broken_http", description=__doc__.splitlines()[0])
    p.add_argument("--port-file", required=True)
    p.add_argument("--pid-file")
    args = p.parse_args(argv)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    anyio.run(serve, args.port_file, args.pid_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
