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

**Relayed requests.** The relay writes a server→client request on the call's own stream with
:meth:`RequestStream.ask` (stored, then written, as the router would) and waits in
:class:`PendingAnswers`, the session's table of requests asked that way; the client's answer
POST — and its progress on the request — is taken there by the POST handler, after the same
header checks and the same ``202``, and never passes through the SDK's dispatcher. The relay
falls back to the SDK's back-channel when the call's stream is not one of these (the SDK's
pipeline, a resumed stream, one already closed). A request whose wait is cancelled is withdrawn
with ``notifications/cancelled`` on the call's stream while it is open (the relay repeats it on
the standalone stream).

Guarantees are those of :class:`~api.standalone_stream.StandaloneStream` — order = event ids,
no wait longer than ``WRITE_TIMEOUT_S`` on a client that stopped reading, it ends when the
client disconnects — plus: the response is the last event written, and the body is ended right
after it."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import anyio
from mcp import MCPError
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse
from starlette.types import Receive, Send

from mcp_reconciler.api.standalone_stream import StandaloneStream
from mcp_reconciler.reconciler import telemetry

_SEP = b"\r\n"

_served = telemetry.meter.create_counter(
    "http.request_streams.direct", description="2025-era request streams written directly"
)
_asked = telemetry.meter.create_counter(
    "http.request_streams.asked", description="Server→client requests asked on a request stream directly"
)

#: Receives the client's progress on a request asked directly: (progress, total, message).
OnProgress = Callable[[float, float | None, str | None], Awaitable[None]]


class _Waiting:
    """One request asked directly: its answer, once the client's POST brings it."""

    def __init__(self, on_progress: OnProgress | None) -> None:
        self.on_progress = on_progress
        self._answered = anyio.Event()
        self._answer: JSONRPCResponse | JSONRPCError | None = None

    def settle(self, answer: JSONRPCResponse | JSONRPCError) -> None:
        self._answer = answer
        self._answered.set()

    async def result(self) -> dict[str, Any]:
        """The client's result; ``MCPError`` carrying its error when it answered with one."""
        await self._answered.wait()
        answer = self._answer
        if isinstance(answer, JSONRPCError):
            raise MCPError(code=answer.error.code, message=answer.error.message, data=answer.error.data)
        assert isinstance(answer, JSONRPCResponse)
        return dict(answer.result)


class PendingAnswers:
    """The requests asked on one transport session's request streams, by id, until answered or
    given up (the asker's ``with`` block). Only ids asked here are taken; every other answer is
    the SDK's."""

    def __init__(self) -> None:
        self._waiting: dict[str, _Waiting] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    @contextlib.contextmanager
    def expect(self, request_id: str, on_progress: OnProgress | None) -> Iterator[_Waiting]:
        """Wait for the answer to ``request_id`` inside the block; leaving it forgets the id."""
        waiting = _Waiting(on_progress)
        self._waiting[request_id] = waiting
        try:
            yield waiting
        finally:
            if self._waiting.get(request_id) is waiting:
                del self._waiting[request_id]

    def takes(self, message: object) -> bool:
        """Whether ``message`` (a parsed client message) is an answer, or progress, for a
        request asked here."""
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            return str(message.id) in self._waiting
        return self._progress_target(message) is not None

    async def take(self, message: object) -> None:
        """Settle the request ``message`` answers, or hand its progress to the asker."""
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            waiting = self._waiting.pop(str(message.id), None)
            if waiting is not None:
                waiting.settle(message)
            return
        target = self._progress_target(message)
        if target is None or not isinstance(message, JSONRPCNotification):
            return
        params: Mapping[str, Any] = message.params or {}
        total = params.get("total")
        note = params.get("message")
        with anyio.CancelScope(shield=True):  # as the SDK's dispatcher runs a progress callback
            await target(
                float(params["progress"]),
                float(total) if isinstance(total, int | float) and not isinstance(total, bool) else None,
                note if isinstance(note, str) else None,
            )

    def _progress_target(self, message: object) -> OnProgress | None:
        if not isinstance(message, JSONRPCNotification) or message.method != "notifications/progress":
            return None
        params = message.params or {}
        token, progress = params.get("progressToken"), params.get("progress")
        if not isinstance(token, str) or isinstance(progress, bool) or not isinstance(progress, int | float):
            return None
        waiting = self._waiting.get(token)
        return waiting.on_progress if waiting is not None else None


def encode_priming(event_id: str, retry_ms: int | None) -> bytes:
    """The priming event (an id and empty data, as sse_starlette encodes it)."""
    retry = b"retry: " + str(retry_ms).encode() + _SEP if retry_ms is not None else b""
    return b"id: " + event_id.encode() + _SEP + b"data: " + _SEP + retry + _SEP


class RequestStream(StandaloneStream):
    """One request's open SSE response, served by :meth:`respond` (not ``serve``: it has a
    request to dispatch). The SDK's router calls :meth:`send`; the response (or error) for the
    request is the last event, after which the stream ends. ``answers`` is the session's
    :class:`PendingAnswers` (where :meth:`ask` waits)."""

    def __init__(self, send: Send, event_store: Any | None, stream_id: str, answers: PendingAnswers) -> None:
        super().__init__(send, event_store, stream_id)
        self.answers = answers

    async def ask(
        self, request_id: str, method: str, params: Mapping[str, Any] | None, on_progress: OnProgress | None
    ) -> dict[str, Any] | None:
        """Ask the client ``method`` on this stream under ``request_id`` and return its result
        (``MCPError`` for its error); with ``on_progress``, the request carries ``request_id``
        as its progress token and the client's progress is handed to it. ``None`` (nothing
        asked) when the stream has already ended."""
        out = dict(params or {})
        if on_progress is not None:
            out["_meta"] = {**(out.get("_meta") or {}), "progressToken": request_id}
        message = JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method, params=out)
        with self.answers.expect(request_id, on_progress) as waiting:
            try:
                if not await self.push(message, message.model_dump_json(by_alias=True, exclude_unset=True)):
                    return None
            except anyio.ClosedResourceError:
                pass  # stored, then the client went: it can resume the stream and still answer
            _asked.add(1)
            try:
                return await waiting.result()
            except anyio.get_cancelled_exc_class():
                await self._withdraw(request_id)
                raise

    async def _withdraw(self, request_id: str) -> None:
        if self.closed:
            return
        cancel = JSONRPCNotification(
            jsonrpc="2.0",
            method="notifications/cancelled",
            params={"requestId": request_id, "reason": "the call this request belongs to ended"},
        )
        with anyio.CancelScope(shield=True), anyio.move_on_after(2), contextlib.suppress(Exception):
            await self.push(cancel, cancel.model_dump_json(by_alias=True, exclude_unset=True))

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
