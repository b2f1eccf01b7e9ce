"""Progress relay for one forwarded operation: the upstream's progress reaches the caller in
order and all of it before the result, with a bounded backlog (:data:`PROGRESS_BACKLOG`)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import anyio
from mcp.server import ServerRequestContext
from mcp.shared.dispatcher import ProgressFnT

from mcp_reconciler.reconciler.upstream import UpstreamConnection

PROGRESS_BACKLOG = 1024  # progress notifications buffered per forwarded call


async def send_with_progress(
    conn: UpstreamConnection,
    request: Any,
    result_type: type[Any],
    ctx: ServerRequestContext[Any],
    timeout_s: float | None = None,
    param_headers: Mapping[str, str] | None = None,
) -> Any:
    """Forward ``request`` and relay the upstream's progress to the caller, in order, all of it
    before the result. The SDK runs each progress callback as its own task; they only enqueue
    (synchronously, in arrival order) and one pump relays, drained before the result returns.
    Progress arriving after the upstream's result has nowhere to go and is dropped, and so is
    progress beyond a bounded backlog (an upstream flooding a slow client costs bounded memory;
    what is relayed stays in order)."""
    send, receive = anyio.create_memory_object_stream[tuple[float, float | None, str | None]](PROGRESS_BACKLOG)

    async def enqueue(progress: float, total: float | None, message: str | None) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.WouldBlock):
            send.send_nowait((progress, total, message))

    async def pump() -> None:
        async with receive:
            async for progress, total, message in receive:
                await ctx.session.report_progress(progress, total, message)

    callback: ProgressFnT = enqueue
    async with anyio.create_task_group() as tg:
        tg.start_soon(pump)
        with send:  # closing it lets the pump drain and end
            return await conn.send(
                request, result_type, timeout_s=timeout_s, progress_callback=callback, param_headers=param_headers
            )


#: The SDK hands request ``_meta`` to handlers with the progress token under its Python name
#: (``progress_token``); the wire name is accepted too, for callers that build ``_meta`` by hand.
PROGRESS_KEYS = ("progress_token", "progressToken")


def progress_token(meta: Mapping[str, Any] | None) -> Any:
    """The caller's progress token in request ``_meta``, if it asked for progress."""
    if not meta:
        return None
    return next((meta[k] for k in PROGRESS_KEYS if meta.get(k) is not None), None)
