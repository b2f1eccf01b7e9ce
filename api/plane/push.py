"""Streams written directly by whichever task has the next frame (issue 26's fan-out, ADR 0038
"Round 3" and "Addendum: fan-out"): a 2025-era session's GET stream (its pushes) and a 2026-era
``subscriptions/listen`` stream (its bus's events). One ``list_changed`` to 1,000 idle streams is
then 1,000 writes in the notifier's own pass — no task wake, no queue hop, no pump per stream.

:func:`start_now` is how a write never stalls the writer: it runs the ASGI ``send`` until it
first waits (the server's flow control: the client stopped reading) and hands only the rest to a
task of its own. That is the coroutine protocol itself (PEP 492: a coroutine that waits yields
to its task), not any server's private state: the stream no longer asks uvicorn whether its
writes are paused (``send.__self__.flow.write_paused``, gone with this change).

:class:`DirectStream` keeps the order; :class:`PushChannel` is a 2025 session's push channel
(the front door's notifier and relay write to it, bound by ``sessions.PUSH_BACKLOG``);
:class:`ListenChannel` a 2026 listen request's channel (the front door's ``ListenStreams`` keeps
its backlog, bound by ``MAX_BUFFERED_EVENTS``)."""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types
from starlette.requests import Request

from mcp_reconciler.api.plane import sse
from mcp_reconciler.api.plane.channel import FrameChannel, ResponseChannel, frame_of

if TYPE_CHECKING:
    from mcp_reconciler.api.plane.response import LiveResponse
    from mcp_reconciler.api.plane.sessions import LegacySession

log = logging.getLogger("mcp_reconciler.plane")

#: A stream's write: one event's pieces onto its response.
Write = Callable[..., Coroutine[Any, Any, None]]


def start_now(write: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Run ``write`` in the calling task until it finishes or first waits. ``None`` when it
    finished (an ASGI ``send`` that did not wait: its bytes are on the transport); else the task
    that runs the rest, so the caller never waits for one client (an exception raised before the
    first wait is the caller's). The rest runs in another task than the start: fit for a write
    that waits on a future (an ASGI ``send`` under its flow control, which is what is passed
    here), not for one that waits inside a cancel scope it entered (a scope is left in the task
    that entered it)."""
    try:
        waiting_on = write.send(None)
    except StopIteration:
        return None
    return asyncio.get_running_loop().create_task(_rest(write, waiting_on))


async def _rest(write: Coroutine[Any, Any, None], waiting_on: Any) -> None:
    await _continued(write, waiting_on)


@types.coroutine
def _continued(write: Coroutine[Any, Any, None], waiting_on: Any) -> Generator[Any, Any, None]:
    """``write`` resumed inside this task from where it waited: what it waits on is this task's
    to wait on, and what the task is sent or thrown (a result, a cancellation) goes back to it —
    what ``await`` does, for a coroutine that was started elsewhere."""
    while True:
        try:
            sent = yield waiting_on
        except BaseException as exc:
            try:
                waiting_on = write.throw(exc)
            except StopIteration:
                return
        else:
            try:
                waiting_on = write.send(sent)
            except StopIteration:
                return


class DirectStream:
    """An open stream written by whichever task has the next frame.

    Guarantees: a frame goes *directly* (:meth:`direct`, written in the caller's task, which
    never waits) only when nothing can be ahead of it or interleave with it: no frame is queued
    (:attr:`queued`) or being written (:attr:`busy`), and the stream is open. A write that the
    server's flow control holds (the client stopped reading) finishes in a task of its own while
    the stream stays busy, so later frames take the owner's bounded backlog, which the stream's
    task writes in order (:meth:`write`, after the write in flight). ``stamp`` makes a frame's
    pieces at the moment it is written (a 2025 event id and its place in the kept history), so
    ids are in wire order."""

    __slots__ = ("_free", "_is_open", "_rest", "_stamp", "_write", "busy", "direct_frames", "queued")

    def __init__(
        self,
        write: Write,
        stamp: Callable[[bytes], tuple[bytes, ...]],
        is_open: Callable[[], bool],
        queued: int = 0,
    ) -> None:
        self._write = write
        self._stamp = stamp
        self._is_open = is_open
        self.busy = True  # the opener writes first (a replay and its priming; an ack): see ready()
        self.queued = queued  # the owner's count of frames in its backlog or being written from it
        self._free: anyio.Event | None = None  # made only when a task waits for a write in flight
        self._rest: asyncio.Task[None] | None = None  # a direct write the transport held
        self.direct_frames = 0

    def ready(self) -> None:
        """The opener's own writes are done: frames may be written directly."""
        self._release()

    def takes_direct(self) -> bool:
        """Whether a frame now may be written directly (class docstring)."""
        return not self.busy and not self.queued and self._is_open()

    def direct(self, frame: bytes) -> None:
        """Write ``frame`` now, from the caller's task, without waiting (the caller checked
        :meth:`takes_direct`). A client gone meanwhile drops it (its stream is ending)."""
        self.busy = True
        self.direct_frames += 1
        try:
            rest = start_now(self._write(*self._stamp(frame)))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            rest = None
        except BaseException:
            self._release()
            raise
        if rest is None:
            self._release()
        else:  # the transport is paused: the rest runs on its own, the stream stays busy
            self._rest = rest
            rest.add_done_callback(self._rested)

    async def write(self, frame: bytes) -> None:
        """Write ``frame`` from the stream's own task (a backlog frame, an ack, a ping), after
        any write in flight. A client gone meanwhile drops it, as :meth:`direct` does (the
        stream's task is being cancelled with the response)."""
        await self.settled()
        self.busy = True
        try:
            await self._write(*self._stamp(frame))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            self._release()

    async def from_backlog(self, frame: bytes) -> None:
        """:meth:`write` of a frame the stream's task took from the backlog (or a keepalive
        ping, which was never counted)."""
        try:
            await self.write(frame)
        finally:
            if frame is not sse.PING:
                self.queued -= 1

    async def settled(self) -> None:
        """Until no write is in flight."""
        while self.busy:
            if self._free is None:
                self._free = anyio.Event()
            await self._free.wait()

    def close(self) -> None:
        """The response is ending without waiting for a held write: it is abandoned (a held
        ASGI ``send`` has written nothing yet)."""
        if self._rest is not None:
            self._rest.cancel()

    def _rested(self, task: asyncio.Task[None]) -> None:
        self._rest = None
        if not task.cancelled() and task.exception() is not None:
            log.debug("a held write ended with %r", task.exception())
        self._release()

    def _release(self) -> None:
        self.busy = False
        if self._free is not None:
            self._free.set()
            self._free = None


class PushChannel(FrameChannel):
    """A 2025 session's push channel (its GET stream's): a frame goes to the open
    :class:`DirectStream` directly when it takes one, else to the bounded backlog (a push never
    waits)."""

    #: The session's GET stream while it is open (a class default: an idle session holds none).
    stream: DirectStream | None = None

    async def emit(self, message: dict[str, Any]) -> None:
        """One frame onto the GET stream, directly or through the backlog (:class:`DirectStream`)."""
        self.push(frame_of(message))

    def push(self, frame: bytes) -> None:
        """``frame`` onto the GET stream, directly or through the backlog; ``anyio.WouldBlock``
        beyond ``PUSH_BACKLOG`` (the push is dropped), ``anyio.ClosedResourceError`` once the
        session is closed."""
        stream = self.stream
        if stream is not None and stream.takes_direct():
            stream.direct(frame)
            return
        self.sink.send_nowait(frame)
        if stream is not None:
            stream.queued += 1

    def open_stream(self, session: LegacySession, write: Write) -> DirectStream:
        """Attach the GET stream now opening (``write`` its writer); frames pushed while no
        stream was open are still in the backlog, ahead of any new one. A push gets an event id
        the client can resume from, a keepalive ping does not."""

        def stamp(frame: bytes) -> tuple[bytes, ...]:
            return (frame,) if frame is sse.PING else session.remember((frame,))

        stream = DirectStream(write, stamp, lambda: not session.closed, self.frames.statistics().current_buffer_used)
        self.stream = stream
        return stream

    def close_stream(self) -> None:
        """The GET stream ended: pushes take the backlog until the next one opens."""
        if self.stream is not None:
            self.stream.close()
        self.stream = None


def _one_piece(frame: bytes) -> tuple[bytes, ...]:
    return (frame,)


class ListenChannel(ResponseChannel):
    """A 2026 ``subscriptions/listen`` request's channel: its frames go onto the response through
    :attr:`stream`, a :class:`DirectStream` — the acknowledgement and backlog frames from the
    listen's own task (:meth:`emit`), the bus's events directly from the publisher's pass when
    the stream is idle (the front door's ``ListenStreams``). No queue and no pump task between
    the bus and the socket; the backlog and its bound are the front door's."""

    def __init__(self, request_id: mcp_types.RequestId | None, request: Request, response: LiveResponse) -> None:
        super().__init__(request_id, request, response.frame)
        self.stream = DirectStream(response.frame, _one_piece, lambda: not response.gone)
        self.stream.ready()

    async def emit(self, message: dict[str, Any]) -> None:
        """One SSE frame onto the response, after any write in flight."""
        await self.stream.write(sse.frame(message))
