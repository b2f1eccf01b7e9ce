"""``GET /v1/events``: the engine's events (``reconciler/events.py``) as a server-sent event stream.

Each event is one SSE message: ``id`` (the engine's event id, strictly increasing), ``event``
(its type: ``publish`` | ``retire`` | ``source`` | ``session`` | ``hold``) and one ``data`` line
of JSON (the models below, documented in ``api/openapi.json``). Three more message types carry
no id: ``hello`` first (the newest event id, so a follower knows where it starts), ``reset``
when a follower asked to resume (``Last-Event-ID``) from an id the engine no longer keeps (it
must re-read state), and ``dropped`` just before the stream ends because the follower was too
slow. A comment line every ``keepalive_s`` keeps idle proxies from closing the stream.

Auth is the control API's: a bearer token in ``Authorization``. Operators see every event.
Owners see what they could read elsewhere in ``/v1`` — publications, retirements, source
changes (sanitized reasons only) and the gateway-wide ``grants`` notice — plus their own
sessions and holds; another principal's session and hold events are not sent to them.

Bounds (an outsider must not grow memory or tasks):
- at most ``max_clients`` streams at once (``gateway.limits.event_streams``), ``max_per_principal``
  for one principal (``event_streams_per_principal``, so one owner cannot take every slot), and
  the last ``reserve`` only for operators (``event_streams_operator_reserve``, ADR 0032); the next
  request answers 429 ``too_many_streams`` naming the bound;
- each stream has a buffer of ``buffer`` events, filled synchronously by the engine's event log
  and emptied by the stream's writer. When an event arrives and the buffer is full the follower
  is *dropped*: it stops receiving, gets ``dropped`` (with the id it last received, to resume
  from) and the stream ends. Nothing is buffered beyond ``buffer``, and the engine never waits;
- each write gets ``write_timeout_s``: a follower that stopped reading altogether (TCP window
  closed) is dropped too, its connection closed.

Resumption: a request with ``Last-Event-ID: n`` first receives the kept events after ``n`` (the
engine keeps the newest 256), then the live ones; there is no gap and no duplicate, because the
subscription and the replay snapshot are taken in the same synchronous step.

The stream ends when the engine stops (``EventLog.close``), so a graceful stop is not held up."""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import Receive, Scope, Send

from mcp_reconciler.api.auth import Authenticator, Principal
from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.engine import Engine
from mcp_reconciler.reconciler.errors import StreamLimitError
from mcp_reconciler.reconciler.events import EngineEvent
from mcp_reconciler.reconciler.quotas import Quota
from mcp_reconciler.sdk import wire

log = logging.getLogger("mcp_reconciler.events")

BUFFER = 256
WRITE_TIMEOUT_S = 10.0
KEEPALIVE_S = 15.0
_LAST_ID_DIGITS = 18


# -- the wire: one model per event type (documented in the OpenAPI file) -------------------------


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: int = Field(description="the engine's event id: strictly increasing, from 1")
    at: float = Field(description="when the engine emitted it (wall clock, seconds)")


class PublishEvent(_Event):
    """A revision became current."""

    type: Literal["publish"] = "publish"
    revision: int
    digest: str
    built_at: float
    published_at: float
    entries: int
    trigger: wire.TriggerOut
    previous: int | None = Field(description="the revision it superseded")
    previous_pins: int = Field(description="pins the superseded revision held at that moment (0: closed at once)")
    previous_drain_deadline_at: float | None = Field(
        description="when the superseded revision is closed at the latest (wall clock; null: closed at once)"
    )


class RetireEvent(_Event):
    """A superseded revision closed: drained to zero pins, or forced at its drain deadline."""

    type: Literal["retire"] = "retire"
    revision: int
    published_at: float
    superseded_at: float | None
    closed_at: float
    forced: bool = Field(description="its drain deadline passed with work left; that work was cancelled")
    pins_left: int
    operations_cancelled: int


class SourceEvent(_Event):
    """A source's state or sanitized last error changed."""

    type: Literal["source"] = "source"
    source: str
    state: str = Field(description="ready | stale | failed | connecting")
    previous_state: str | None
    last_error: str | None = Field(description="sanitized reason")
    consecutive_failures: int


class SessionEvent(_Event):
    """A session was created or removed, or grants changed outside a request."""

    type: Literal["session"] = "session"
    change: Literal["created", "removed", "grants"]
    session_id: str | None
    owner: str | None = Field(description="role-qualified principal id of the session's owner")


class HoldEvent(_Event):
    """A revision hold was added, released or expired."""

    type: Literal["hold"] = "hold"
    change: Literal["added", "released", "expired"]
    hold_id: str
    revision: int
    owner: str
    expires_at: float


class HelloEvent(BaseModel):
    """First message of every stream (no SSE id)."""

    model_config = ConfigDict(extra="forbid")
    last_id: int = Field(description="the newest event id when the stream started (0: none yet)")
    role: Literal["operator", "owner"]


class ResetEvent(BaseModel):
    """Last-Event-ID names events the engine no longer keeps: re-read state (no SSE id)."""

    model_config = ConfigDict(extra="forbid")
    last_id: int = Field(description="the newest event id; live events follow")


class DroppedEvent(BaseModel):
    """The follower was too slow; the stream ends after this message (no SSE id)."""

    model_config = ConfigDict(extra="forbid")
    reason: Literal["slow_reader"]
    last_id: int = Field(description="the id of the last event sent on this stream: resume with Last-Event-ID")


EVENT_MODELS: dict[str, type[BaseModel]] = {
    "publish": PublishEvent,
    "retire": RetireEvent,
    "source": SourceEvent,
    "session": SessionEvent,
    "hold": HoldEvent,
    "hello": HelloEvent,
    "reset": ResetEvent,
    "dropped": DroppedEvent,
}


def event_json(event: EngineEvent) -> dict[str, Any]:
    """``event`` as its wire model's JSON (validated: the documented shape is the sent shape)."""
    model = EVENT_MODELS[event.type]
    return model.model_validate({"id": event.id, "at": event.at, **dataclasses.asdict(event.payload)}).model_dump(
        mode="json"
    )


def visible(principal: Principal, event: EngineEvent) -> bool:
    """Whether ``principal`` is sent ``event`` (module docstring): operators everything; others
    gateway-wide events and their own sessions' and holds'."""
    return principal.role == "operator" or event.owner is None or event.owner == principal.id


def _frame(kind: str, data: dict[str, Any], event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


# -- the endpoint ---------------------------------------------------------------------------------


@dataclass
class _Follower:
    principal: Principal
    send: MemoryObjectSendStream[EngineEvent]
    dropped: bool = False
    closing: bool = False
    wake: anyio.Event = field(default_factory=anyio.Event)

    def offer(self, event: EngineEvent) -> None:
        """The event log's subscriber: synchronous, never blocks."""
        if self.dropped or not visible(self.principal, event):
            return
        try:
            self.send.send_nowait(event)
        except anyio.WouldBlock:
            self.dropped = True  # the buffer is full: this follower is too slow
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return
        self.wake.set()

    def close(self) -> None:
        self.closing = True
        self.wake.set()


class EventStream:
    """The ``GET /v1/events`` ASGI endpoint over ``engine.events`` (module docstring for the
    format, auth and bounds). The bounds are attributes, read per request."""

    def __init__(
        self,
        engine: Engine,
        auth: Authenticator,
        *,
        max_clients: int | None = None,
        max_per_principal: int | None = None,
        reserve: int | None = None,
        buffer: int = BUFFER,
        write_timeout_s: float = WRITE_TIMEOUT_S,
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        self.engine = engine
        self.auth = auth
        bounds = engine.bounds
        self.max_clients = max_clients if max_clients is not None else bounds.event_streams
        self.max_per_principal = (
            max_per_principal if max_per_principal is not None else bounds.event_streams_per_principal
        )
        # The last streams are kept for operators (ADR 0032); never all of them.
        self.reserve = reserve if reserve is not None else bounds.event_streams_operator_reserve
        self._per_principal: dict[str, int] = {}
        self.buffer = buffer
        self.write_timeout_s = write_timeout_s
        self.keepalive_s = keepalive_s
        self.clients = 0
        self.dropped = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one ``GET /v1/events``: 401 without a valid token, 429 at the stream bound, else
        the stream until the follower leaves, is dropped, or the engine stops."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        principal = self.auth.authenticate(headers.get("authorization"))
        if principal is None:
            await _error(send, 401, "unauthenticated", "a valid bearer token is required (Authorization: Bearer …)")
            return
        last_id = _last_event_id(headers.get("last-event-id"))
        mine = self._per_principal.get(principal.id, 0)
        quota = Quota("event_streams", "event streams", self.max_clients, self.max_per_principal, self.reserve)
        try:
            quota.check(StreamLimitError, held=self.clients, mine=mine, operator=principal.role == "operator")
        except StreamLimitError as exc:
            telemetry.event_stream_refused.add(1)
            await _error(send, 429, exc.code, str(exc), bound=exc.bound, limit=exc.limit)
            return
        self.clients += 1
        self._per_principal[principal.id] = mine + 1
        telemetry.event_stream_clients.add(1)
        try:
            await self._stream(principal, last_id, receive, send)
        finally:
            self.clients -= 1
            left = self._per_principal[principal.id] - 1
            if left:
                self._per_principal[principal.id] = left
            else:
                del self._per_principal[principal.id]  # bounded by the streams open, not by who ever came
            telemetry.event_stream_clients.add(-1)

    async def _stream(self, principal: Principal, last_id: int | None, receive: Receive, send: Send) -> None:
        events = self.engine.events
        tx, rx = anyio.create_memory_object_stream[EngineEvent](max_buffer_size=self.buffer)
        follower = _Follower(principal, tx)
        # Subscribe and snapshot the replay in one synchronous step: no gap, no duplicate.
        unsubscribe = events.subscribe(follower.offer, follower.close)
        replay = events.since(last_id) if last_id is not None else ()
        newest = events.last_id
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-store"),
                        (b"x-accel-buffering", b"no"),
                    ],
                }
            )
            async with anyio.create_task_group() as tg:

                async def disconnected() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(disconnected)
                ok = await self._run(follower, rx, principal, replay, newest, send)
                if ok:
                    await self._write(send, b"", more_body=False)
                tg.cancel_scope.cancel()
        finally:
            unsubscribe()
            tx.close()
            rx.close()

    async def _run(
        self,
        follower: _Follower,
        rx: MemoryObjectReceiveStream[EngineEvent],
        principal: Principal,
        replay: tuple[EngineEvent, ...] | None,
        newest: int,
        send: Send,
    ) -> bool:
        """Write the stream; False when a write timed out (the connection is then abandoned)."""
        sent = 0
        head = [b"retry: 2000\n\n", _frame("hello", {"last_id": newest, "role": principal.role})]
        if replay is None:
            head.append(_frame("reset", {"last_id": newest}))
        else:
            for event in replay:
                if visible(principal, event):
                    head.append(_frame(event.type, event_json(event), event.id))
                sent = event.id
        if not await self._write(send, b"".join(head)):
            return False
        while True:
            if follower.dropped:
                self.dropped += 1
                telemetry.event_stream_dropped.add(1, {"reason": "slow_reader"})
                log.info("event stream: dropped a slow follower (%s) after event %d", principal.role, sent)
                await self._write(send, _frame("dropped", {"reason": "slow_reader", "last_id": sent}))
                return True
            if follower.closing:
                return True
            try:
                event = rx.receive_nowait()
            except anyio.WouldBlock:
                # No await between the empty check and this wait: an offer after the check sets
                # this very event.
                with anyio.move_on_after(self.keepalive_s) as idle:
                    await follower.wake.wait()
                follower.wake = anyio.Event()
                if idle.cancelled_caught and not await self._write(send, b": keepalive\n\n"):
                    return False
                continue
            if not await self._write(send, _frame(event.type, event_json(event), event.id)):
                return False
            sent = event.id

    async def _write(self, send: Send, body: bytes, *, more_body: bool = True) -> bool:
        with anyio.move_on_after(self.write_timeout_s):
            await send({"type": "http.response.body", "body": body, "more_body": more_body})
            return True
        self.dropped += 1
        telemetry.event_stream_dropped.add(1, {"reason": "write_timeout"})
        log.info("event stream: dropped a follower that stopped reading (write timed out)")
        return False


def _last_event_id(raw: str | None) -> int | None:
    if raw is None:
        return None
    raw = raw.strip()
    if not raw.isascii() or not raw.isdigit() or len(raw) > _LAST_ID_DIGITS:
        return 0  # not one of ours: treat as "from the start" (a reset if that is no longer kept)
    return int(raw)


async def _error(
    send: Send, status: int, code: str, message: str, *, bound: str | None = None, limit: int | None = None
) -> None:
    body = json.dumps(wire.error(code, message, bound=bound, limit=limit)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
