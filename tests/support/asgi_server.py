"""An ASGI app behind uvicorn on an ephemeral 127.0.0.1 port, for tests that need a real HTTP
server in-process. The socket is bound and listening before uvicorn starts: the port is known at
once and a connection made before uvicorn runs waits in the kernel's backlog until it does (then
after the app's lifespan startup) — nothing to poll for, no uvicorn internals to read."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import uvicorn


def listening_socket() -> socket.socket:
    """A TCP socket on 127.0.0.1:<ephemeral>, already listening (uvicorn serves it as it is:
    asyncio's ``create_server(sock=...)`` listens again). ``IPPROTO_TCP``: accepted connections
    get ``TCP_NODELAY``, as the gateway's own."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


@contextlib.asynccontextmanager
async def serve_app(app: Any, sock: socket.socket, *, lifespan: str = "off") -> AsyncIterator[None]:
    """Serve the ASGI ``app`` with uvicorn on the listening ``sock`` for the block, then stop it
    and close the socket. Clients may connect at once (the socket already listens)."""
    config = uvicorn.Config(
        app, log_level="warning", lifespan=lifespan, access_log=False, timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            try:
                yield
            finally:
                server.should_exit = True
    finally:
        sock.close()


@contextlib.asynccontextmanager
async def served_asgi(app: Any, *, lifespan: str = "off") -> AsyncIterator[str]:
    """``app`` served until the block ends; yields its base URL (``http://127.0.0.1:PORT``)."""
    sock = listening_socket()
    async with serve_app(app, sock, lifespan=lifespan):
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
