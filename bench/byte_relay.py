"""The floor for a forwarded MCP call: a byte relay on the gateway's own HTTP stack (issue 26).

    python bench/byte_relay.py --upstream http://127.0.0.1:PORT/mcp --port-file PATH

A raw ASGI app under uvicorn with httptools (the server the gateway runs on) that forwards every
request on ``/mcp`` to one upstream URL over a keep-alive ``httpx2`` connection pool: method, body
and the MCP headers through, the upstream's status, headers and body streamed back chunk by chunk
(so SSE response streams and the 2025-era standalone GET stream work). It understands nothing of
MCP: no parsing, no sessions, no authority. What it costs per call is the least any gateway on
this stack can cost, which is why ``bench/bench_dataplane.py`` measures the gateway against it in
the same run.

The port is the kernel's (bound to port 0 before uvicorn starts) and written to ``--port-file``
atomically once the socket listens, so nothing can take it between choosing and binding."""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx2
import uvicorn

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# Request headers a streamable-HTTP server reads (both eras); everything else stays behind.
FORWARD = frozenset(
    {
        b"content-type",
        b"accept",
        b"mcp-session-id",
        b"mcp-protocol-version",
        b"mcp-method",
        b"mcp-name",
        b"last-event-id",
        b"authorization",
    }
)
# Hop-by-hop response headers: the relay's own connection to its client decides these.
HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"content-length"})


class ByteRelay:
    """ASGI app: every ``/mcp`` request to ``upstream``, bytes through, streamed back."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        # One pool for the process's lifetime: keep-alive to the upstream, as a gateway would.
        self.client = httpx2.AsyncClient(timeout=None, limits=httpx2.Limits(max_connections=256))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/mcp":
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        chunks = []
        while True:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k in FORWARD]
        request = self.client.build_request(scope["method"], self.upstream, headers=headers, content=b"".join(chunks))
        response = await self.client.send(request, stream=True)
        try:
            out = [(k.lower(), v) for k, v in response.headers.raw if k.lower() not in HOP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": out})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--upstream", required=True, help="the upstream's streamable-HTTP URL")
    p.add_argument("--port-file", required=True, help="write the port listened on here")
    args = p.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    tmp = f"{args.port_file}.tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(str(sock.getsockname()[1]))
    os.replace(tmp, args.port_file)
    config = uvicorn.Config(
        ByteRelay(args.upstream), http="httptools", lifespan="off", log_level="warning", access_log=False
    )
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
