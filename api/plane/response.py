"""A request's response while its operation runs, both eras: in the 2026 era ``application/json``
when the operation finishes without emitting anything, ``text/event-stream`` from its first
notification on; in the 2025 era an SSE stream from the start (:meth:`LiveResponse.start`: the
session's header, then its priming event) — and the per-request duties beside it: in the 2026
era the client closing its connection cancels the operation (noticed from
:data:`WATCH_AFTER_S` into the operation on; in the 2025 era it does not: the request runs on
for a client that resumes), and a stream silent for
:data:`~api.plane.sse.PING_INTERVAL_S` is pinged.

Guarantees: frames reach the wire whole and in the order they were written (one writer at a
time); the operation's own frames are written as it emits them, with the transport's flow
control as back-pressure (no queue between them); nothing is written after :meth:`end`.

Why not a task group: a request used to run its operation in a task group beside a disconnect
watcher, with a memory stream between the operation and the writer and a ``move_on_after`` per
frame for the ping timer — about 40 % of the gateway's CPU per call went to anyio and the loop
(ADR 0038, and ADR 0042 for the 2025 era). Here the operation runs in the request's own task
inside one cancel scope; the disconnect watcher (2026 era) is one plain task (the ASGI server is
asyncio's: uvicorn), started by a loop timer only for an operation still running after
:data:`WATCH_AFTER_S`, and the same timer then starts a pinger only for an operation that has
been silent for the ping interval."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import anyio
from starlette.types import Receive, Send

from mcp_reconciler.api.plane import jsonrpc, sse

#: A 2026-era operation starts watching for its client leaving once it has run this long: a
#: watcher task per request (created, run to its first wait, cancelled, with uvicorn resuming
#: the socket's reads for it) was ~4 % of a forwarded call's CPU, and most calls answer sooner
#: (ADR 0038, "Call CPU"). A client leaving earlier is noticed at this point, not at once.
WATCH_AFTER_S = 0.1


async def respond(
    send: Send, status: int, body: bytes | list[bytes], content_type: bytes | None, *extra: tuple[bytes, bytes]
) -> None:
    """One whole response; a body given as pieces is written piece by piece (a big result: the
    transport's flow control paces the writes, and other requests are served between them)."""
    chunks = body if isinstance(body, list) else [body]
    headers = [(b"content-length", str(sum(map(len, chunks))).encode()), *extra]
    if content_type is not None:
        headers.insert(0, (b"content-type", content_type))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    for n, chunk in enumerate(chunks, 1):
        await send({"type": "http.response.body", "body": chunk, "more_body": n < len(chunks)})


async def reply(send: Send, message: Mapping[str, Any]) -> None:
    """``message`` as a whole ``application/json`` response with its protocol status."""
    body = await jsonrpc.encode_sliced(message)  # every reply, whatever its size (ADR 0040)
    await respond(send, jsonrpc.status_of(message), body, b"application/json")


class LiveResponse:
    """The response of one request (module docstring); :meth:`running` holds its duties while
    the operation runs, :meth:`frame` writes one SSE frame, :meth:`finish` the answer (2026 era:
    JSON or the stream's last frame), :meth:`end` a stream's last event and its end."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.streaming = False  # the SSE head was sent
        self.gone = False  # the client left, or the answer was written: no more frames
        self._lock: anyio.Lock | None = None  # made when a second writer (the pinger) appears
        self._last = 0.0  # loop time of the last frame
        self._pinger: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    @contextlib.contextmanager
    def running(self, receive: Receive | None) -> Iterator[None]:
        """Run the operation in the block with the ping timer armed. With ``receive`` (2026 era) a
        client that disconnects meanwhile cancels the operation (that is cancellation in that
        era; the block then ends quietly); without (2025 era) nothing watches the client: a
        write to a client that left is the ASGI server's no-op. Call :meth:`finish` or
        :meth:`end` after the block."""
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        with anyio.CancelScope() as scope:
            # One timer: the watcher first (2026 era), then the pinger. An operation that answers
            # within WATCH_AFTER_S starts no task at all (a client leaving before is noticed then).
            if receive is not None:
                self._timer = loop.call_later(WATCH_AFTER_S, self._start_watcher, receive, scope)
            else:
                self._timer = loop.call_later(sse.PING_INTERVAL_S, self._start_pinger)
            try:
                yield
            finally:
                self._timer.cancel()
                if self._watcher is not None:
                    self._watcher.cancel()
                if self._pinger is not None:
                    self._pinger.cancel()

    async def start(self, *headers: tuple[bytes, bytes]) -> None:
        """Send the SSE stream's head now, with ``headers`` beside the stream's own (2025 era: the
        session's id, before the priming event)."""
        self.streaming = True
        await self._send({"type": "http.response.start", "status": 200, "headers": [*sse.HEADERS, *headers]})

    async def frame(self, frame: bytes) -> None:
        """Write one SSE frame (the stream's head first); ``anyio.ClosedResourceError`` once the
        client is gone or the answer was written (a channel drops the notification)."""
        if self._lock is None:
            if self.gone:
                raise anyio.ClosedResourceError
            await self._write(frame)
            return
        async with self._lock:
            if self.gone:
                raise anyio.ClosedResourceError
            await self._write(frame)

    async def finish(self, message: Mapping[str, Any]) -> None:
        """Write the answer: the whole JSON response, or the stream's last frame and its end."""
        if not self.streaming:
            self.gone = True
            await reply(self._send, message)
            return
        await self.end(await sse.frame_sliced(message))

    async def end(self, last: Sequence[bytes] = ()) -> None:
        """Write ``last`` (one event's pieces, none when there is no answer) and end the stream;
        no frame is written after it."""
        if self._lock is not None:
            async with self._lock:  # a ping being written goes first; none after
                self.gone = True
        self.gone = True
        pieces = sse.coalesced(tuple(last)) or (b"",)  # a small answer and the end: one send
        for n, piece in enumerate(pieces, 1):
            await self._send({"type": "http.response.body", "body": piece, "more_body": n < len(pieces)})

    async def _write(self, frame: bytes) -> None:
        if not self.streaming:
            self.streaming = True
            await self._send({"type": "http.response.start", "status": 200, "headers": sse.HEADERS})
        self._last = asyncio.get_running_loop().time()
        await self._send({"type": "http.response.body", "body": frame, "more_body": True})

    async def _watch(self, receive: Receive, scope: anyio.CancelScope) -> None:
        while (await receive()).get("type") != "http.disconnect":
            pass
        self.gone = True
        scope.cancel()

    def _start_watcher(self, receive: Receive, scope: anyio.CancelScope) -> None:
        loop = asyncio.get_running_loop()
        self._watcher = loop.create_task(self._watch(receive, scope))
        self._timer = loop.call_later(sse.PING_INTERVAL_S - WATCH_AFTER_S, self._start_pinger)

    def _start_pinger(self) -> None:
        # fast_acquire: an uncontended frame takes the lock without yielding, so a listen stream's
        # event is still written without waiting (push.start_now) once the pinger exists.
        self._lock = anyio.Lock(fast_acquire=True)
        self._pinger = asyncio.get_running_loop().create_task(self._ping())

    async def _ping(self) -> None:
        """A ping whenever the stream has been silent for the interval, until cancelled."""
        loop = asyncio.get_running_loop()
        while not self.gone:
            silent = loop.time() - self._last
            if silent < sse.PING_INTERVAL_S:
                await asyncio.sleep(sse.PING_INTERVAL_S - silent)
                continue
            with contextlib.suppress(anyio.ClosedResourceError):
                await self.frame(sse.PING)


class StreamWriter:
    """A long-lived 2025-era stream's body writer (the GET stream, a resumed stream): one event's
    pieces in as few ``send`` calls as :func:`~api.plane.sse.coalesced` makes them, and nothing
    once the client is gone (the requests behind it run on: their events are kept for a client
    that resumes)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.detached = False

    async def write(self, *pieces: bytes, end: bool = False) -> None:
        """One event's pieces (``end``: and the body's end), unless the client is gone."""
        pieces = sse.coalesced(pieces)
        try:
            for i, piece in enumerate(pieces, 1):
                if not self.detached:
                    more = not (end and i == len(pieces))
                    await self._send({"type": "http.response.body", "body": piece, "more_body": more})
        except OSError:
            self.detached = True

    async def end(self) -> None:
        """End the body (nothing once the client is gone)."""
        if not self.detached:
            with contextlib.suppress(OSError):
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})
