"""The floor for a forwarded MCP call: a byte relay on the gateway's own HTTP stacks (issue 26).

    python bench/byte_relay.py --upstream http://127.0.0.1:PORT/mcp --port-file PATH

Downstream, a raw ASGI app under uvicorn with httptools (the server the gateway runs on);
upstream, the gateway's own client stack (``reconciler/fasthttp.py``'s level: anyio sockets,
one buffer written per request, the response parsed by ``httptools``, keep-alive connections
pooled for at most ``KEEPALIVE_EXPIRY_S`` and never reused once readable). Every request on
``/mcp`` goes to one upstream URL: method, body and the MCP headers (``FORWARD``) through; the
upstream's status, headers and body back. A response that is complete in the first read (a JSON
answer, a short SSE stream) is sent as one ``http.response.start`` and one body; anything longer
(SSE request streams, the 2025-era standalone GET stream) is streamed as it arrives, until the
upstream ends it or the client goes away (then the upstream connection is closed, which is how
both eras cancel). It understands nothing of MCP: no parsing, no sessions, no authority. What it
costs per call is the least any gateway on these stacks can cost, which is why
``bench/bench_dataplane.py`` measures the gateway against it in the same run.

The port is the kernel's (bound to port 0 before uvicorn starts) and written to ``--port-file``
atomically once the socket listens, so nothing can take it between choosing and binding."""

from __future__ import annotations

import argparse
import os
import select
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import anyio
import httptools
import uvicorn
from anyio.abc import ByteStream, SocketAttribute

from mcp_reconciler.reconciler.fasthttp import KEEPALIVE_EXPIRY_S

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
# Hop-by-hop response headers: the relay's own connection to its client decides these
# (``content-length`` travels: a body relayed whole keeps its length).
HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding"})
MAX_IDLE = 256


class _Response:
    """httptools callbacks: the upstream response's head and the body bytes not yet relayed."""

    __slots__ = ("chunks", "complete", "head_done", "headers", "keep_alive", "parser")

    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: list[bytes] = []
        self.head_done = self.complete = self.keep_alive = False
        self.parser: Any = None

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name not in HOP:
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, chunk: bytes) -> None:
        self.chunks.append(chunk)

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()  # read here: False once returned

    def take(self) -> bytes:
        body, self.chunks = b"".join(self.chunks), []
        return body


def _readable(stream: ByteStream) -> bool:
    """An idle connection with something to read (the server's FIN, or bytes nobody asked for)
    must not carry another request."""
    try:
        return bool(select.select([stream.extra(SocketAttribute.raw_socket)], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class ByteRelay:
    """ASGI app: every ``/mcp`` request to ``upstream``, bytes through (module docstring)."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        assert parts.scheme == "http" and parts.hostname, upstream
        self._host, self._port = parts.hostname, parts.port or 80
        self._target = (parts.path or "/").encode()
        self._host_header = b"host: " + parts.netloc.encode() + b"\r\n"
        self._idle: list[tuple[ByteStream, float]] = []  # (connection, idle since)

    async def _checkout(self) -> tuple[ByteStream, bool]:
        """A pooled connection (``True``) or a new one (``False``)."""
        while self._idle:
            stream, since = self._idle.pop()
            if anyio.current_time() - since < KEEPALIVE_EXPIRY_S and not _readable(stream):
                return stream, True
            await stream.aclose()
        return await anyio.connect_tcp(self._host, self._port), False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != "/mcp":
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        msg = await receive()
        body = msg.get("body", b"")
        while msg.get("more_body"):
            msg = await receive()
            body += msg.get("body", b"")
        head = [scope["method"].encode(), b" ", self._target, b" HTTP/1.1\r\n", self._host_header]
        for k, v in scope["headers"]:
            if k in FORWARD:
                head += (k, b": ", v, b"\r\n")
        if body or scope["method"] == "POST":
            head += (b"content-length: ", str(len(body)).encode(), b"\r\n")
        head += (b"\r\n", body)
        request = b"".join(head)
        while True:
            stream, reused = await self._checkout()
            pooled = False
            try:
                pooled = await self._exchange(stream, request, receive, send)
                break
            except _Stale:
                if not reused:
                    raise
            finally:
                if pooled and len(self._idle) < MAX_IDLE:
                    self._idle.append((stream, anyio.current_time()))
                else:
                    with anyio.CancelScope(shield=True):
                        await stream.aclose()

    async def _exchange(self, stream: ByteStream, request: bytes, receive: Receive, send: Send) -> bool:
        """Write ``request``, relay the response; whether the connection may be reused. A pooled
        connection the upstream closed before answering raises :class:`_Stale` (sent again on a
        new one: a keep-alive close races the request; a bench upstream's tools are idempotent)."""
        response = _Response()
        parser = response.parser = httptools.HttpResponseParser(response)
        try:
            await stream.send(request)
            data = await stream.receive(65536)
        except (anyio.BrokenResourceError, anyio.EndOfStream, OSError):
            raise _Stale() from None
        parser.feed_data(data)
        while not response.head_done:
            parser.feed_data(await stream.receive(65536))
        start = {"type": "http.response.start", "status": parser.get_status_code(), "headers": response.headers}
        if response.complete:  # the whole answer in the first read: one head, one body
            await send(start)
            await send({"type": "http.response.body", "body": response.take()})
            return response.keep_alive
        await send(start)
        left = False
        async with anyio.create_task_group() as tg:

            async def until_disconnect() -> None:
                nonlocal left
                while (await receive())["type"] != "http.disconnect":
                    pass
                left = True
                tg.cancel_scope.cancel()  # the client left: drop the upstream connection

            tg.start_soon(until_disconnect)
            while True:
                if response.chunks:
                    await send({"type": "http.response.body", "body": response.take(), "more_body": True})
                if response.complete:
                    break
                try:
                    data = await stream.receive(65536)
                except anyio.EndOfStream:
                    parser.feed_data(b"")
                    break
                parser.feed_data(data)
            await send({"type": "http.response.body", "body": response.take(), "more_body": False})
            tg.cancel_scope.cancel()
        return response.complete and response.keep_alive and not left


class _Stale(Exception):
    """A pooled connection was closed by the upstream before it answered."""


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--upstream", required=True, help="the upstream's streamable-HTTP URL")
    p.add_argument("--port-file", required=True, help="write the port listened on here")
    p.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the gateway's loop")
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
        ByteRelay(args.upstream),
        http="httptools",
        loop=args.loop,  # uvicorn's "auto" picks uvloop whenever importable: the gateway's loop instead
        lifespan="off",
        log_level="warning",
        access_log=False,
    )
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
