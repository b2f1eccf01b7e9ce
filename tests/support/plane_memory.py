"""An SDK client transport onto a front door in memory, through the data plane's stdio handler
(``api/plane/stdio.py``): ``Client(PlaneTransport(front))`` serves the front door's operations
without HTTP, as the local user, on the same dispatcher as every other transport. (Passing
``front.server`` to the SDK's ``Client`` would run the SDK's own server pipeline, which the
gateway no longer serves requests through.)"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.plane.stdio import StdioPlane


class PlaneTransport:
    """One client session over :class:`StdioPlane` (module docstring); an async context manager
    yielding the SDK's ``(read, write)`` streams."""

    def __init__(self, front: FrontDoor) -> None:
        self._front = front
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> Any:
        to_plane, plane_in = anyio.create_memory_object_stream[bytes](64)
        to_client, client_in = anyio.create_memory_object_stream[SessionMessage | Exception](64)
        client_out, from_client = anyio.create_memory_object_stream[SessionMessage](64)
        stack = self._stack
        tg = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tg.cancel_scope.cancel)  # runs first on exit: the plane stops with the client

        async def lines() -> AsyncIterator[bytes]:
            async with plane_in:
                async for raw in plane_in:
                    yield raw

        async def forward() -> None:
            async with to_plane, from_client:
                async for message in from_client:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await to_plane.send(data.encode() + b"\n")

        async def write(data: bytes) -> None:
            for line in data.splitlines():
                if line.strip():
                    await to_client.send(SessionMessage(jsonrpc_message_adapter.validate_json(line)))

        async def serve() -> None:
            async with to_client:
                await StdioPlane(self._front).serve(lines(), write)

        tg.start_soon(forward)
        tg.start_soon(serve)
        return client_in, client_out

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()
