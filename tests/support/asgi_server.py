"""An ASGI app behind uvicorn on an ephemeral 127.0.0.1 port, for tests that need a real HTTP
server in-process. The socket is bound and listening before uvicorn starts: the port is known at
once and a connection made before uvicorn runs waits in the kernel's backlog until it does (then
after the app's lifespan startup) — nothing to poll for."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import uvicorn


@contextlib.asynccontextmanager
async def served_asgi(app: Any, *, lifespan: str = "off") -> AsyncIterator[str]:
    """``app`` served until the block ends; yields its base URL (``http://127.0.0.1:PORT``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # uvicorn serves it as it is (asyncio's create_server(sock=...) listens again)
    config = uvicorn.Config(app, log_level="warning", lifespan=lifespan, timeout_graceful_shutdown=3)
    server = uvicorn.Server(config)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            try:
                yield f"http://127.0.0.1:{sock.getsockname()[1]}"
            finally:
                server.should_exit = True
    finally:
        sock.close()
