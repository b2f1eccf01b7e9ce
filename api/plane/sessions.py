"""The 2025-11-25 era's sessions on the data plane: the table of open sessions (bounded in total
and per client, I18; the front door's ``PushGate``), each session's connection, channels and
kept events, and the request streams a client may resume with ``Last-Event-ID``
(``era2025`` serves the wire).

Event ids are ``<session>.<stream>:<n>``: the GET stream is stream 0, request streams count up
from 1, ``n`` counts every event of the session in order. One bounded history per session
(:data:`EVENT_HISTORY`) keeps the framed events of every stream. A push is written directly to
the session's idle GET stream by the task that pushes it, else through the stream's bounded
backlog (``push.PushStream``: same order, same ids, same bound)."""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
import mcp_types as types
from anyio import EventStatistics
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.connection import Connection
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from starlette.types import Scope

from mcp_reconciler.api.plane.channel import Replies
from mcp_reconciler.api.plane.push import PushChannel
from mcp_reconciler.reconciler import telemetry

log = logging.getLogger("mcp_reconciler.plane")

#: Frames a stream may hold unsent before they are dropped (a stalled client costs bounded memory).
PUSH_BACKLOG = 256
#: Frames kept per session for ``Last-Event-ID`` resumption, every stream together (I18: bounded
#: per session; the SDK-based plane's per-session event store kept as many).
EVENT_HISTORY = 256
#: The stream key of a session's GET stream (request streams count up from 1).
GET_STREAM = 0
#: The body of a priming event (an id, no data): after a replay, and first on a request stream.
_PRIMING = b"data: \r\n\r\n"

_sessions_gauge = telemetry.meter.create_up_down_counter(
    "plane.legacy_sessions", description="Open 2025-era sessions on the data plane"
)


def client_key(scope: Scope) -> str:
    """Who a request comes from, for the per-client session bound: its bearer credential (hashed;
    the token is never kept), else its peer address. Behind a reverse proxy every peer is the proxy."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            return "credential:" + hashlib.sha256(value[7:].strip()).hexdigest()[:32]
    client = scope.get("client")
    return f"peer:{client[0]}" if client else "peer:?"


#: One SSE event as it is written: its pieces in order (an id line, then the frame, which a big
#: result brings as many pieces: ADR 0040). Kept as written, never joined (no copy of a big one).
Event = tuple[bytes, ...]


@dataclass(eq=False)
class RequestStream:
    """A request's SSE stream while its request runs: the resumed GET that follows it, if any."""

    key: int
    follower: MemoryObjectSendStream[Event] | None = None
    done: bool = False

    def relay(self, event: Event) -> None:
        """Hand ``event`` to the follower (dropped when it is gone or full: it can resume again)."""
        if self.follower is not None:
            try:
                self.follower.send_nowait(event)
            except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self.follower = None

    def finish(self) -> None:
        """The response was written: the follower's stream ends."""
        self.done = True
        if self.follower is not None:
            self.follower.close()
            self.follower = None


class LazyEvent(anyio.Event):
    """An ``anyio.Event`` that makes the loop's event only when someone waits: the connection's
    ``initialized`` is set by the handshake and only read with ``is_set()`` on the data plane, so
    an idle session holds a flag, not an event and its waiter queue (~1 KiB, issue 26)."""

    def __new__(cls) -> LazyEvent:
        """A plain instance (``anyio.Event.__new__`` would hand back the backend's event)."""
        return object.__new__(cls)

    def __init__(self) -> None:
        self._flag = False
        self._event: anyio.Event | None = None

    def set(self) -> None:
        """Set the flag (and wake a waiter, if any)."""
        self._flag = True
        if self._event is not None:
            self._event.set()

    def is_set(self) -> bool:
        """Whether :meth:`set` was called."""
        return self._flag

    async def wait(self) -> None:
        """Until :meth:`set` (at once when it was)."""
        if self._flag:
            await anyio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()

    def statistics(self) -> EventStatistics:
        """How many tasks wait (none until one does)."""
        return self._event.statistics() if self._event is not None else EventStatistics(tasks_waiting=0)


@dataclass(eq=False, slots=True)
class LegacySession:
    """One 2025-era session: who opened it (and the client key it counts against), its
    connection (what the front door binds), its GET stream's channel and its kept events."""

    id: str
    principal: str
    client: str
    connection: Connection
    standalone: PushChannel
    replies: Replies
    last_seen: float
    streams: int = 0  # open request streams and the GET stream: a busy session is never idle
    get_open: bool = False
    closed: bool = False
    events: int = 0
    # Made with the first event kept: an idle session keeps none (a deque costs ~0.7 KiB: issue 26).
    history: deque[tuple[int, int, Event]] | None = None
    live: dict[int, RequestStream] = field(default_factory=dict)  # request streams still running
    running: dict[types.RequestId, anyio.CancelScope] = field(default_factory=dict)
    _stream_keys: int = 0

    def next_event_id(self, stream: int = GET_STREAM) -> str:
        """The next SSE event id of this session: ``<session>.<stream>:<n>`` (``n`` in order)."""
        self.events += 1
        return f"{self.id}.{stream}:{self.events}"

    def remember(self, frame: Sequence[bytes], stream: int = GET_STREAM) -> Event:
        """``frame`` (its pieces) after the next event id of ``stream``, kept for ``Last-Event-ID``."""
        event = (f"id: {self.next_event_id(stream)}\r\n".encode(), *frame)
        if self.history is None:
            self.history = deque(maxlen=EVENT_HISTORY)
        self.history.append((self.events, stream, event))
        return event

    def priming(self, stream: int) -> bytes:
        """A priming event of ``stream``: an id and no data (2025-11-25: the client can resume)."""
        return f"id: {self.next_event_id(stream)}\r\n".encode() + _PRIMING

    def open_stream(self) -> RequestStream:
        """A new request stream of this session."""
        self._stream_keys += 1
        stream = RequestStream(self._stream_keys)
        self.live[stream.key] = stream
        return stream

    def close_stream(self, stream: RequestStream) -> None:
        """``stream``'s request is answered (or cancelled): its follower ends."""
        stream.finish()
        self.live.pop(stream.key, None)

    def replay_after(self, last_event_id: str) -> tuple[int, list[Event]]:
        """The stream ``last_event_id`` names and its kept frames after it (the GET stream and
        nothing for an id of another session, one not of this form, or one evicted)."""
        head, _, seq = last_event_id.rpartition(":")
        sid, _, key = head.rpartition(".")
        if sid != self.id or not seq.isdigit() or not key.isdigit():
            return GET_STREAM, []
        stream, after = int(key), int(seq)
        return stream, [frame for n, s, frame in self.history or () if s == stream and n > after]


class SessionTable:
    """The open 2025-era sessions, bounded in total and per client (I18); the front door's
    ``PushGate`` (is a session's GET stream open?). Its counts are the transport-session figures
    of ``/v1/status``, the limit gauges and the tests."""

    def __init__(
        self,
        *,
        max_sessions: int,
        max_per_client: int,
        idle_s: float,
        on_close: Callable[[Connection], None] = lambda connection: None,
    ) -> None:
        self.max_sessions = max_sessions
        self.on_close = on_close  # the front door's unbind, after the connection's exit stack
        self.max_per_client = max_per_client
        self.idle_s = idle_s
        self.sessions: dict[str, LegacySession] = {}
        self._per_client: dict[str, int] = {}
        self.refused_total = 0  # initializes refused at the total bound (gateway.limits.hits)
        self.refused_per_client = 0  # initializes refused at the per-client bound (gateway.limits.hits)

    def room(self, client: str) -> int | None:
        """``None`` when one more session may open for ``client``; else the HTTP status of the
        refusal (503 at the total bound, 429 at the client's)."""
        if len(self.sessions) >= self.max_sessions:
            self.refused_total += 1
            return 503
        if self._per_client.get(client, 0) >= self.max_per_client:
            self.refused_per_client += 1
            return 429
        return None

    def open(self, principal: str, client: str) -> LegacySession:
        """A new session for ``principal``, counted against ``client`` (the caller checked :meth:`room`)."""
        sid = uuid.uuid4().hex
        replies = Replies()
        standalone = PushChannel(None, None, PUSH_BACKLOG, wait=False, replies=replies)
        connection = Connection.for_loop(standalone, session_id=sid, protocol_version_hint=LATEST_HANDSHAKE_VERSION)
        connection.initialized = LazyEvent()  # the SDK's event, made only if waited on (issue 26)
        session = LegacySession(sid, principal, client, connection, standalone, replies, anyio.current_time())
        self.sessions[sid] = session
        self._per_client[client] = self._per_client.get(client, 0) + 1
        _sessions_gauge.add(1)
        return session

    def open_sessions(self) -> int:
        """Sessions open now."""
        return len(self.sessions)

    def sessions_of(self, client: str) -> int:
        """Sessions open now for ``client`` (a :func:`client_key`)."""
        return self._per_client.get(client, 0)

    def find(self, sid: str | None, principal: str) -> LegacySession | None:
        """The open session ``sid`` if ``principal`` opened it (else ``None``: 404 either way)."""
        session = self.sessions.get(sid) if sid is not None else None
        if session is None or session.principal != principal:
            return None
        session.last_seen = anyio.current_time()
        return session

    async def close(self, session: LegacySession) -> None:
        """End ``session`` exactly once: out of the table, its streams ended, its requests
        cancelled, its connection's exit stack unwound, then ``on_close`` (the front door drops
        its binding and the session made for it)."""
        if session.closed:
            return
        session.closed = True
        self.sessions.pop(session.id, None)
        left = self._per_client.get(session.client, 1) - 1
        if left:
            self._per_client[session.client] = left
        else:
            self._per_client.pop(session.client, None)
        _sessions_gauge.add(-1)
        session.standalone.sink.close()
        for scope in list(session.running.values()):
            scope.cancel()
        with anyio.CancelScope(shield=True):
            try:
                await session.connection.exit_stack.aclose()
            finally:
                self.on_close(session.connection)

    async def reap(self, now: float) -> int:
        """Close every session idle (no request, no open stream) for ``idle_s``; returns how many."""
        idle = [s for s in self.sessions.values() if s.streams == 0 and now - s.last_seen >= self.idle_s]
        for session in idle:
            log.info("closing 2025-era session idle for %.0f s", now - session.last_seen)
            await self.close(session)
        return len(idle)

    async def close_all(self) -> None:
        """Shutdown: end every session (their GET streams end, so HTTP can stop at once)."""
        for session in list(self.sessions.values()):
            await self.close(session)

    def standalone_stream_open(self, http_session_id: str) -> bool | None:
        """``PushGate``: whether the session's GET stream is open; ``None`` once it is gone."""
        session = self.sessions.get(http_session_id)
        return None if session is None else session.get_open
