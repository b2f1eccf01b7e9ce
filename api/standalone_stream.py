"""A 2025-era HTTP session's standalone GET stream, written straight to the wire (issue 11).

Everything a server says to a 2025-11-25 HTTP client outside a request — ``list_changed``, log
records, ``notifications/resources/updated`` — rides the session's one GET stream. The SDK
serves that stream through a pipeline: the session's dispatcher hands each message to the
transport's message router (a rendezvous), the router to a per-stream writer task (a buffered
memory stream), that task to sse_starlette's response task (another rendezvous), which writes
it. Three task switches per message is most of what one resource update told to 200 sessions
costs. Here the stream is one object, :class:`StandaloneStream`, that takes the SDK router's
place at the end of that pipeline and writes each event to the ASGI ``send`` in the caller's
task, and that the gateway can also push to directly (:meth:`StandaloneStream.push`), skipping
the dispatcher and the router as well.

Guarantees and their races:

- **Order = event ids.** Every event is stored in the session's event store and written with
  no await in between but the write itself (the SDK's router stores and then calls
  :meth:`StandaloneStream.send`; :meth:`~StandaloneStream.push` does the same in one call), and
  writes leave in call order (uvicorn's flow control wakes blocked writers first in, first
  out). So the order on the wire is the order of the ids, and a client that resumes with
  ``Last-Event-ID`` misses nothing the store still holds.
- **No wait on a client that stopped reading.** A write the client's connection does not take
  within :data:`WRITE_TIMEOUT_S` ends the stream (the events are in the store; the client
  resumes with ``Last-Event-ID``), so neither the SDK's router nor the update workers can be
  held by one slow reader for longer than that.
- **It ends** when the client disconnects, the session ends (the SDK's cleanup closes it), or
  it is closed by ``close_standalone_sse_stream``; a comment ping every
  :data:`PING_INTERVAL_S` keeps proxies from closing an idle stream, as sse_starlette's did.

What stays the SDK's: request checks, the one-stream-per-session conflict (409), and a GET that
resumes with ``Last-Event-ID`` (the SDK's replay path serves that stream its own way; pushes to
it take the SDK's path). The hook that puts this stream in place is ``sdk_compat`` item 11."""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime
from typing import Any

import anyio
from starlette.types import Receive, Send

from mcp_reconciler.reconciler import telemetry

log = logging.getLogger("mcp_reconciler.http")

#: A write the client's connection does not take within this long ends the stream.
WRITE_TIMEOUT_S = 10.0
#: A comment line this often on an idle stream (sse_starlette's default).
PING_INTERVAL_S = 15.0

_SEP = b"\r\n"  # sse_starlette's default line separator, so the wire bytes are the ones it wrote

_streams = telemetry.meter.create_up_down_counter(
    "http.standalone_streams", description="2025-era GET streams written directly, open now"
)


def encode_event(data: str, event_id: str | None) -> bytes:
    """One SSE ``message`` event with JSON ``data`` (no line breaks: compact JSON has none)."""
    head = b"id: " + event_id.encode() + _SEP if event_id else b""
    return head + b"event: message" + _SEP + b"data: " + data.encode() + _SEP + _SEP


class _NoReader:
    """The receive half the SDK's ``(send, receive)`` stream pair expects; nothing reads it."""

    def close(self) -> None:
        """Nothing to close."""

    async def aclose(self) -> None:
        """Nothing to close."""


class StandaloneStream:
    """One open GET stream. The SDK's router calls :meth:`send` (as on the memory stream it
    replaces); the gateway calls :meth:`push`. See the module docstring for the guarantees."""

    def __init__(self, send: Send, event_store: Any | None, stream_id: str) -> None:
        self._send = send
        self._store = event_store
        self._stream_id = stream_id
        self._closed = anyio.Event()
        self.reader = _NoReader()

    @property
    def closed(self) -> bool:
        """Whether the stream has ended (nothing more is written)."""
        return self._closed.is_set()

    def close(self) -> None:
        """End the stream (the SDK's ``close()`` on its memory stream; idempotent)."""
        self._closed.set()

    async def aclose(self) -> None:
        """End the stream (the SDK's cleanup calls this)."""
        self.close()

    async def send(self, item: Any) -> None:
        """Write one event the SDK's router already stored (an ``EventMessage``). Raises
        ``anyio.ClosedResourceError`` once the stream has ended — the router then forgets it."""
        data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
        await self._write(encode_event(data, item.event_id))

    async def push(self, message: Any, data: str) -> bool:
        """Store ``message`` (a JSON-RPC message model whose wire JSON is ``data``) in the
        session's event store and write it; ``False`` when the stream has ended (nothing
        stored). Raises ``anyio.ClosedResourceError`` if it ends during the write (the event
        stays stored: a resuming client gets it)."""
        if self.closed:
            return False
        event_id = await self._store.store_event(self._stream_id, message) if self._store is not None else None
        await self._write(encode_event(data, event_id))
        return True

    async def _write(self, chunk: bytes) -> None:
        if self.closed:
            raise anyio.ClosedResourceError
        try:
            # A bare scope, not fail_after: this runs once per event per session (the fan-out's
            # inner loop), and the scope is a third cheaper than the generator wrapper.
            with anyio.CancelScope(deadline=anyio.current_time() + WRITE_TIMEOUT_S) as scope:
                await self._send({"type": "http.response.body", "body": chunk, "more_body": True})
            if scope.cancelled_caught:
                log.info("GET stream closed: the client took no data for %.0f s", WRITE_TIMEOUT_S)
                self.close()
                raise anyio.ClosedResourceError
        except OSError:
            self.close()
            raise anyio.ClosedResourceError from None
        except anyio.ClosedResourceError:
            raise
        except BaseException:
            self.close()  # cancelled mid-write: nothing after this is in order any more
            raise

    async def serve(self, headers: list[tuple[bytes, bytes]], receive: Receive) -> None:
        """Send the response head, then hold the response open until the stream ends (client
        gone, session ended, closed), pinging while idle; end the body if the client is there."""
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        _streams.add(1)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._until_disconnect, receive)
                tg.start_soon(self._ping)
                await self._closed.wait()
                tg.cancel_scope.cancel()
        finally:
            _streams.add(-1)
            self.close()
        with anyio.move_on_after(1, shield=True):
            with contextlib.suppress(OSError):  # the client is gone: there is nothing left to end
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _until_disconnect(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.close()

    async def _ping(self) -> None:
        while True:
            await anyio.sleep(PING_INTERVAL_S)
            comment = f": ping - {datetime.now(UTC)}".encode() + _SEP + _SEP
            try:
                await self._write(comment)
            except anyio.ClosedResourceError:
                return
