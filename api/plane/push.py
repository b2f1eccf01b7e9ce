"""A 2025-era session's push stream (its GET stream): pushes written directly by the task that
pushes them while the stream is idle, else through the stream's bounded backlog, in one order
with one set of event ids (issue 26's fan-out, ADR 0038 "Round 3").

:class:`PushChannel` is the session's push channel (the front door's notifier and relay write to
it); :class:`PushStream` is its open GET stream, which ``era2025`` serves; the bound is
``sessions.PUSH_BACKLOG``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
from starlette.types import Send

from mcp_reconciler.api.plane import sse
from mcp_reconciler.api.plane.channel import FrameChannel, frame_of

if TYPE_CHECKING:
    from mcp_reconciler.api.plane.sessions import LegacySession


def transport_writable(send: Send) -> Callable[[], bool] | None:
    """Whether a ``send`` to this response would complete without waiting, asked of the server's
    flow control: uvicorn's ``send`` waits only while its transport's writes are paused (the client
    stopped reading). ``None`` for a server that does not tell (then nothing is written
    directly: a push always takes the stream's backlog)."""
    flow = getattr(getattr(send, "__self__", None), "flow", None)
    if flow is None or not isinstance(getattr(flow, "write_paused", None), bool):
        return None
    return lambda: not flow.write_paused


class PushStream:
    """A session's open GET stream, written by whichever task has the next frame (issue 26's
    fan-out: one ``list_changed`` to 1,000 idle streams was 1,000 task wakes and cancel scopes).

    Guarantees: a push goes *directly* — written by the task that pushes it, no backlog hop, no
    wake of the stream's task — only when nothing can be ahead of it or interleave with it: no
    frame is queued in the backlog or being written (:attr:`busy`), the session is open, and the
    transport takes the bytes without waiting (:func:`transport_writable`: a client that stopped
    reading never stalls the pusher, the notifier telling every session). Otherwise the frame
    takes the bounded backlog (``PUSH_BACKLOG``, dropped beyond it), which the stream's task
    drains in order, waiting while a direct write is in flight. Either way the event gets its id
    and is kept (``Last-Event-ID``) at the moment it is written, so ids are in wire order."""

    __slots__ = ("_free", "_session", "_writable", "_write", "busy", "direct_frames", "queued")

    def __init__(
        self,
        session: LegacySession,
        write: Callable[..., Awaitable[None]],
        writable: Callable[[], bool] | None,
        queued: int,
    ) -> None:
        self._session = session
        self._write = write
        self._writable = writable
        self.busy = True  # the opening task writes first (a replay and its priming): see ready()
        self.queued = queued  # frames in the backlog, or taken from it and not yet written
        self._free: anyio.Event | None = None  # made only when the stream's task waits on a direct write
        self.direct_frames = 0

    def ready(self) -> None:
        """The opening task's own writes are done: pushes may be written directly."""
        self._release()

    def takes_direct(self) -> bool:
        """Whether a push now may be written directly (class docstring)."""
        return (
            not self.busy
            and not self.queued
            and not self._session.closed
            and self._writable is not None
            and self._writable()
        )

    async def direct(self, frame: bytes) -> None:
        """Write the push ``frame`` now (the caller checked :meth:`takes_direct`)."""
        self.direct_frames += 1
        await self._write_event(frame)

    async def from_backlog(self, frame: bytes) -> None:
        """Write ``frame``, which the stream's task took from the backlog (or a keepalive ping),
        after a direct write in flight."""
        while self.busy:
            if self._free is None:
                self._free = anyio.Event()
            await self._free.wait()
        try:
            await self._write_event(frame)
        finally:
            if frame is not sse.PING:
                self.queued -= 1

    async def _write_event(self, frame: bytes) -> None:
        self.busy = True
        try:
            # a push gets an id the client can resume from; a keepalive ping does not
            await self._write(*((frame,) if frame is sse.PING else self._session.remember((frame,))))
        finally:
            self._release()

    def _release(self) -> None:
        self.busy = False
        if self._free is not None:
            self._free.set()
            self._free = None


class PushChannel(FrameChannel):
    """A session's push channel (its GET stream's): a frame goes to the open :class:`PushStream`
    directly when it takes one, else to the bounded backlog (a push never waits)."""

    #: The session's GET stream while it is open (a class default: an idle session holds none).
    stream: PushStream | None = None

    async def emit(self, message: dict[str, Any]) -> None:
        """One frame onto the GET stream, directly or through the backlog (:class:`PushStream`)."""
        frame = frame_of(message)
        stream = self.stream
        if stream is not None and stream.takes_direct():
            await stream.direct(frame)
            return
        self.sink.send_nowait(frame)  # WouldBlock beyond PUSH_BACKLOG: the push is dropped
        if stream is not None:
            stream.queued += 1

    def open_stream(self, session: LegacySession, send: Send, write: Callable[..., Awaitable[None]]) -> PushStream:
        """Attach the GET stream now opening (``send`` its response's, ``write`` its writer);
        frames pushed while no stream was open are still in the backlog, ahead of any new one."""
        stream = PushStream(session, write, transport_writable(send), self.frames.statistics().current_buffer_used)
        self.stream = stream
        return stream

    def close_stream(self) -> None:
        """The GET stream ended: pushes take the backlog until the next one opens."""
        self.stream = None
