"""The channel back to a client on the data plane: what the front door's operations send while
they run (progress, log records, listen events, pushes) becomes SSE frames on one stream.

A :class:`FrameChannel` is an SDK ``Outbound``/``DispatchContext`` (the type the operations'
``ServerSession`` takes). Guarantee: every notification becomes exactly one complete frame on
:attr:`FrameChannel.sink`, in order; once the stream is gone a notification is dropped, never
raised into the operation. ``wait``: a request's own stream applies back-pressure (the
operation waits for the writer, as on the SDK server); a session's push stream never blocks its
sender and drops beyond its bounded backlog (a stalled client costs bounded memory, I18). No
server→client requests on the plane yet: :meth:`FrameChannel.send_raw_request` refuses."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from starlette.requests import Request

from mcp_reconciler.api.plane import sse

log = logging.getLogger("mcp_reconciler.plane")


class FrameChannel:
    """One stream's outbound channel (module docstring). ``sink`` is where frames go (the name
    the front door's listen streams look for), ``frames`` where the stream's writer reads them."""

    def __init__(
        self, request_id: types.RequestId | None, request: Request | None, capacity: int, *, wait: bool
    ) -> None:
        self.request_id = request_id
        self.message_metadata = ServerMessageMetadata(request_context=request)
        self.transport = TransportContext(
            kind="streamable-http", can_send_request=False, headers=request.headers if request else None
        )
        self.progress_token: types.ProgressToken | None = None
        self.cancel_requested = anyio.Event()
        self.can_send_request = False
        self.sink, self.frames = anyio.create_memory_object_stream[bytes](capacity)
        self._wait = wait

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        """Refused: no server→client requests on the plane yet."""
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        """One notification frame onto the stream (dropped once it is gone, or full when not waiting)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        try:
            if self._wait:
                await self.sink.send(sse.frame(message))
            else:
                self.sink.send_nowait(sse.frame(message))
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            log.debug("dropped %s: the stream is closed or full", method)

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """``notifications/progress`` for the request's own token (none: nothing is sent)."""
        if self.progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.notify("notifications/progress", params)
