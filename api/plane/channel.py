"""The channel back to a client on the data plane: what the front door's operations send while
they run (progress, log records, listen events, pushes, the relay's requests) becomes messages
on one stream — SSE frames on HTTP (:class:`FrameChannel`), lines on stdio (``stdio``).

A channel is an SDK ``Outbound``/``DispatchContext`` (the type the operations' ``ServerSession``
takes). Guarantees: every message is written whole and in order; once the stream is gone a
notification is dropped, never raised into the operation. ``wait`` (HTTP): a request's own
stream applies back-pressure (the operation waits for the writer, as on the SDK server); a
session's push stream never blocks its sender and drops beyond its bounded backlog (a stalled
client costs bounded memory, I18).

Server→client requests (the relay's sampling, elicitation, roots: 2025 era and stdio) go out
under the id the relay chose (``CallOptions["request_id"]``, else one minted here) and wait for
the client's response, which the era's handler hands to the session's :class:`Replies`; a
channel without ``Replies`` (2026 era: no back-channel) refuses with ``NoBackChannelError``."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import MCPError
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from starlette.requests import Request

from mcp_reconciler.api.plane import jsonrpc, sse
from mcp_reconciler.api.plane.response import LiveResponse

log = logging.getLogger("mcp_reconciler.plane")

#: Requests of the gateway one session may have unanswered at once (I18).
MAX_PENDING_REPLIES = 64


#: Receives the client's progress on a request the gateway asked: (progress, total, message).
OnProgress = Callable[[float, float | None, str | None], Awaitable[None]]


class Replies:
    """The answers a client owes for the requests the gateway sent it, by id, and the progress it
    reports on them: one table per session (a response may arrive on any POST of the session).
    Bounded (I18)."""

    def __init__(self, limit: int = MAX_PENDING_REPLIES) -> None:
        self._limit = limit
        # Created on the first request of the gateway (most sessions never get one: issue 26's
        # idle sessions pay for two empty tables otherwise).
        self._waiting: dict[types.RequestId, MemoryObjectSendStream[jsonrpc.Reply]] | None = None
        self._progress: dict[types.RequestId, OnProgress] | None = None
        self._minted = 0

    def mint(self) -> str:
        """A request id unique within the session (never an integer: the client's own are)."""
        self._minted += 1
        return f"gw-{self._minted}"

    @contextlib.contextmanager
    def expect(
        self, request_id: types.RequestId, on_progress: OnProgress | None = None
    ) -> Iterator[MemoryObjectReceiveStream[jsonrpc.Reply]]:
        """Wait for the reply to ``request_id`` while the block runs; the client's progress on it
        (its progress token is ``request_id``) goes to ``on_progress`` meanwhile."""
        if self._waiting is None or self._progress is None:
            self._waiting, self._progress = {}, {}
        if len(self._waiting) >= self._limit:
            raise MCPError(code=types.INTERNAL_ERROR, message="too many requests awaiting the client")
        send, receive = anyio.create_memory_object_stream[jsonrpc.Reply](1)
        self._waiting[request_id] = send
        if on_progress is not None:
            self._progress[request_id] = on_progress
        try:
            with receive:
                yield receive
        finally:
            self._waiting.pop(request_id, None)
            self._progress.pop(request_id, None)
            send.close()

    async def progress(self, params: Mapping[str, Any] | None) -> bool:
        """Hand the client's ``notifications/progress`` to the request of the gateway it reports
        on, before anything else of the client's is read (its answer waits: the relay sends the
        progress up first); ``False`` when no such request waits."""
        token = params.get("progressToken") if params else None
        done = params.get("progress") if params else None
        report = self._progress.get(token) if self._progress and isinstance(token, str | int) else None
        if report is None or params is None or isinstance(done, bool) or not isinstance(done, int | float):
            return False
        total, message = params.get("total"), params.get("message")
        with anyio.CancelScope(shield=True):  # as the SDK's dispatcher runs a progress callback
            await report(
                float(done),
                float(total) if isinstance(total, int | float) and not isinstance(total, bool) else None,
                message if isinstance(message, str) else None,
            )
        return True

    def deliver(self, reply: jsonrpc.Reply) -> bool:
        """Hand ``reply`` to the request waiting for it; ``False`` when none is (late or unknown)."""
        waiting = self._waiting.pop(reply.id, None) if self._waiting else None
        if waiting is None:
            return False
        with contextlib.suppress(anyio.WouldBlock, anyio.BrokenResourceError):
            waiting.send_nowait(reply)
        return True


class Channel:
    """What every channel does; a subclass writes one message (:meth:`emit`)."""

    def __init__(self, request_id: types.RequestId | None, replies: Replies | None) -> None:
        self.request_id = request_id
        self.progress_token: types.ProgressToken | None = None
        self._cancel_requested: anyio.Event | None = None
        self.can_send_request = replies is not None
        self._replies = replies

    @property
    def cancel_requested(self) -> anyio.Event:
        """Set when the request is cancelled; made on first use (an idle session's push channel
        never needs one, and an event costs ~0.7 KiB: issue 26)."""
        if self._cancel_requested is None:
            self._cancel_requested = anyio.Event()
        return self._cancel_requested

    async def emit(self, message: dict[str, Any]) -> None:
        """Write ``message`` (a subclass's); raise ``anyio.ClosedResourceError`` once gone."""
        raise NotImplementedError

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        """One notification (dropped once the stream is gone or full)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        try:
            await self.emit(message)
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

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        """Ask the client ``method`` on this stream and return its result (``MCPError`` for its
        error or a timeout; ``NoBackChannelError`` without a back-channel)."""
        if self._replies is None:
            raise NoBackChannelError(method)
        opts = opts or {}
        request_id = opts.get("request_id") or self._replies.mint()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        on_progress = opts.get("on_progress")
        if on_progress is not None:  # the client reports progress under the request's own id
            params = {**(params or {}), "_meta": {**((params or {}).get("_meta") or {}), "progressToken": request_id}}
        if params is not None:
            message["params"] = dict(params)
        timeout = opts.get("timeout")
        with self._replies.expect(request_id, on_progress) as answer:
            try:
                await self.emit(message)
            except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
                raise MCPError(code=types.CONNECTION_CLOSED, message="Connection closed") from None
            with anyio.move_on_after(timeout if timeout is not None else float("inf")) as waited:
                reply = await answer.receive()
            if waited.cancelled_caught:
                raise MCPError(code=types.REQUEST_TIMEOUT, message="Request timed out")
        if reply.error is not None:
            raise MCPError.from_error_data(types.ErrorData.model_validate(reply.error))
        return dict(reply.result or {})


class FrameChannel(Channel):
    """A channel onto an SSE stream (module docstring). ``sink`` is where frames go (the name the
    front door's listen streams look for), ``frames`` where the stream's writer reads them."""

    def __init__(
        self,
        request_id: types.RequestId | None,
        request: Request | None,
        capacity: int,
        *,
        wait: bool,
        replies: Replies | None = None,
    ) -> None:
        super().__init__(request_id, replies)
        self._request = request
        self._capacity = capacity
        self._wait = wait
        # Made on first use (issue 26: an idle session's GET-stream channel holds none of them
        # until a push or its GET stream comes, ~1.5 KiB saved per idle session).
        self._metadata: ServerMessageMetadata | None = None
        self._transport: TransportContext | None = None
        self._pair: tuple[MemoryObjectSendStream[bytes], MemoryObjectReceiveStream[bytes]] | None = None

    @property
    def message_metadata(self) -> ServerMessageMetadata:
        """The SDK's per-message metadata: the HTTP request the channel answers (if any)."""
        if self._metadata is None:
            self._metadata = ServerMessageMetadata(request_context=self._request)
        return self._metadata

    @property
    def transport(self) -> TransportContext:
        """What the SDK's operations learn of the transport (streamable HTTP, the request's headers)."""
        if self._transport is None:
            request = self._request
            self._transport = TransportContext(
                kind="streamable-http",
                can_send_request=self.can_send_request,
                headers=request.headers if request else None,
            )
        return self._transport

    def _streams(self) -> tuple[MemoryObjectSendStream[bytes], MemoryObjectReceiveStream[bytes]]:
        if self._pair is None:
            self._pair = anyio.create_memory_object_stream[bytes](self._capacity)
        return self._pair

    @property
    def sink(self) -> MemoryObjectSendStream[bytes]:
        """Where frames go (bounded by the channel's capacity)."""
        return self._streams()[0]

    @property
    def frames(self) -> MemoryObjectReceiveStream[bytes]:
        """Where the stream's writer reads the frames."""
        return self._streams()[1]

    async def emit(self, message: dict[str, Any]) -> None:
        """One SSE frame onto the stream (:func:`frame_of`)."""
        frame = frame_of(message)
        if self._wait:
            await self.sink.send(frame)
        else:
            self.sink.send_nowait(frame)


_BARE_NOTIFICATION = frozenset({"jsonrpc", "method"})


def frame_of(message: dict[str, Any]) -> bytes:
    """``message``'s SSE frame (a notification without params, as ``list_changed``, is one frame
    made once and written to every session's stream: ``sse.bare_notification``)."""
    bare = message.keys() == _BARE_NOTIFICATION and message["jsonrpc"] == "2.0"
    return sse.bare_notification(message["method"]) if bare else sse.frame(message)


class ResponseChannel(Channel):
    """A 2026-era request's channel straight onto its response (``response.LiveResponse``): each
    message is written as it is emitted, with the transport's back-pressure, no queue between.
    No back-channel (this era has none)."""

    def __init__(self, request_id: types.RequestId | None, request: Request, response: LiveResponse) -> None:
        super().__init__(request_id, None)
        self.message_metadata = ServerMessageMetadata(request_context=request)
        self.transport = TransportContext(kind="streamable-http", can_send_request=False, headers=request.headers)
        self._response = response

    async def emit(self, message: dict[str, Any]) -> None:
        """One SSE frame onto the response."""
        await self._response.frame(sse.frame(message))


async def next_frame(frames: MemoryObjectReceiveStream[bytes]) -> bytes | None:
    """The next frame of a stream, :data:`~api.plane.sse.PING` after a silent ping interval, or
    ``None`` once the stream's writer closed it."""
    with anyio.move_on_after(sse.PING_INTERVAL_S):
        try:
            return await frames.receive()
        except anyio.EndOfStream:
            return None
    return sse.PING
