"""A 2025-era request's SSE response, written straight to the wire (issue 11).

A 2025-11-25 client's POST of a request is answered with an event stream that carries, in
order, what the server says while serving it — progress, log records, server→client requests
the relay sends on the call's behalf — and then the response, which ends it. The SDK serves it
through the same pipeline as the GET stream (``api/standalone_stream.py``): dispatcher →
message router → per-request memory stream → writer task → sse_starlette's response task →
uvicorn, two task switches and sse_starlette's framing per event. For a plain forwarded call
that is the response; for a relayed sampling round trip it is the relayed request too, on the
path the relay's target (≤ 2 ms over direct, ``bench/bench_relay.py``) is measured on.

:class:`RequestStream` takes the per-request memory stream's place (the SDK's router sends to it
exactly as before) and writes each event to the ASGI ``send`` in the router's task; the
response ends it. The SDK still validates and dispatches the request, stores every event in the
session's event store before it is written (so a client resuming with ``Last-Event-ID`` misses
nothing), and closes the stream on ``close_sse_stream`` (the server's polling hint). The hook
that puts it in place is ``sdk_compat`` item 13 (:func:`~api.sdk_compat.serve_requests`).

Guarantees are those of :class:`~api.standalone_stream.StandaloneStream` — order = event ids,
no wait longer than ``WRITE_TIMEOUT_S`` on a client that stopped reading, it ends when the
client disconnects — plus: the response is the last event written, and the body is ended right
after it."""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
from mcp_types import JSONRPCError, JSONRPCResponse
from starlette.types import Receive

from mcp_reconciler.api.standalone_stream import StandaloneStream
from mcp_reconciler.reconciler import telemetry

_SEP = b"\r\n"

_served = telemetry.meter.create_counter(
    "http.request_streams.direct", description="2025-era request streams written directly"
)


def encode_priming(event_id: str, retry_ms: int | None) -> bytes:
    """The priming event (an id and empty data, as sse_starlette encodes it)."""
    retry = b"retry: " + str(retry_ms).encode() + _SEP if retry_ms is not None else b""
    return b"id: " + event_id.encode() + _SEP + b"data: " + _SEP + retry + _SEP


class RequestStream(StandaloneStream):
    """One request's open SSE response, served by :meth:`respond` (not ``serve``: it has a
    request to dispatch). The SDK's router calls :meth:`send`; the response (or error) for the
    request is the last event, after which the stream ends."""

    async def send(self, item: Any) -> None:
        """Write one event the SDK's router already stored; the response ends the stream."""
        await super().send(item)
        if isinstance(item.message, JSONRPCResponse | JSONRPCError):
            self.close()

    async def respond(
        self, headers: list[tuple[bytes, bytes]], receive: Receive, dispatch: Any, *, priming: bytes | None
    ) -> None:
        """Send the response head (and the priming event), hand the request to ``dispatch`` (an
        awaitable: the SDK's read stream), and hold the response open until the stream ends;
        then end the body if the client is there."""
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        _served.add(1)
        try:
            if priming is not None:
                await self._write(priming)
            await dispatch
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._until_disconnect, receive)
                tg.start_soon(self._ping)
                await self._closed.wait()
                tg.cancel_scope.cancel()
        except anyio.ClosedResourceError:
            pass  # the client went away or stopped reading: the events are in the store
        finally:
            self.close()
        with anyio.move_on_after(1, shield=True):
            with contextlib.suppress(OSError):
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})
