"""The 2025-11-25 era on the gateway's data plane: the ``initialize`` handshake, an
``Mcp-Session-Id`` bound to the identity that opened it, request POSTs answered on SSE streams,
the standalone GET stream for pushes, DELETE, and idle reaping — bounded in total and per
principal (I18).

- ``initialize`` (no session header) opens a session when the bounds allow (503
  ``too_many_sessions`` otherwise, retryable), answers the negotiated version and the front
  door's capabilities, and names the session in ``Mcp-Session-Id``.
- Every other POST and the GET/DELETE name their session: none → 400, an unknown id or one opened
  by another principal → 404 (the same answer: a session id of another identity is not
  revealed, ADR 0013). A ``MCP-Protocol-Version`` header the era does not know → 400.
- Requests answer on ``text/event-stream`` (the SDK server's SSE mode): a priming event naming
  the stream, notifications the operation emits (progress, log records), then the response.
  Notifications and client responses POSTed are acknowledged 202.
- One GET stream per session (a second one: 409); pushes (``list_changed``, resource updates,
  log records) ride it. The front door holds a push until it is open (``PushGate``).
- DELETE, the idle timeout (no request and no open stream for ``idle_s``) and shutdown end a
  session exactly once: its connection's exit stack unwinds (the front door's bindings go).
- The relay's server→client requests (sampling, elicitation, roots) ride the request's stream;
  the client's response, POSTed on the session, is handed to the session's ``Replies`` (202).
- Pushes on the GET stream carry event ids; a GET with ``Last-Event-ID`` first replays the kept
  pushes after it (the last :data:`EVENT_HISTORY` per session), then continues live.

Not yet: resuming a request's own stream (the SDK server primes each with an event id)."""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp import MCPError
from mcp.server.connection import Connection
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.mcp_auth import IDENTITY_KEY, McpIdentity
from mcp_reconciler.api.plane import jsonrpc, sse
from mcp_reconciler.api.plane.channel import FrameChannel, Replies
from mcp_reconciler.api.plane.dispatch import Dispatcher, context, error_data
from mcp_reconciler.api.plane.era2026 import accepts, next_frame, read_body
from mcp_reconciler.reconciler import telemetry

log = logging.getLogger("mcp_reconciler.plane")

SESSION_HEADER = "mcp-session-id"
#: Frames a GET stream may hold unsent before pushes are dropped (a stalled client costs bounded memory).
PUSH_BACKLOG = 256
#: GET-stream frames kept per session for ``Last-Event-ID`` resumption (I18: bounded per session).
EVENT_HISTORY = 128

_sessions_gauge = telemetry.meter.create_up_down_counter(
    "plane.legacy_sessions", description="Open 2025-era sessions on the data plane"
)


@dataclass(eq=False)
class LegacySession:
    """One 2025-era session: who opened it, its connection (what the front door binds) and its
    GET stream's channel."""

    id: str
    principal: str
    connection: Connection
    standalone: FrameChannel
    replies: Replies
    last_seen: float
    streams: int = 0  # open request streams and the GET stream: a busy session is never idle
    get_open: bool = False
    closed: bool = False
    events: int = 0

    history: deque[tuple[int, bytes]] = field(default_factory=lambda: deque(maxlen=EVENT_HISTORY))

    def next_event_id(self) -> str:
        """The next SSE event id of this session (unique within it, in order)."""
        self.events += 1
        return f"{self.id}/{self.events}"

    def remember(self, frame: bytes) -> bytes:
        """``frame`` (a GET-stream push) with the next event id, kept for ``Last-Event-ID``."""
        event_id = self.next_event_id()
        framed = f"id: {event_id}\r\n".encode() + frame
        self.history.append((self.events, framed))
        return framed

    def replay_after(self, last_event_id: str) -> list[bytes]:
        """The kept GET-stream frames after ``last_event_id`` (none for an id of another session
        or one not of this form); at most :data:`EVENT_HISTORY` of them."""
        sid, _, seq = last_event_id.partition("/")
        if sid != self.id or not seq.isdigit():
            return []
        return [frame for n, frame in self.history if n > int(seq)]


class SessionTable:
    """The open 2025-era sessions, bounded in total and per principal (I18); the front door's
    ``PushGate`` (is a session's GET stream open?)."""

    def __init__(self, *, max_sessions: int, max_per_principal: int, idle_s: float) -> None:
        self.max_sessions = max_sessions
        self.max_per_principal = max_per_principal
        self.idle_s = idle_s
        self.sessions: dict[str, LegacySession] = {}
        self._per_principal: dict[str, int] = {}

    def admits(self, principal: str) -> bool:
        """Whether one more session may open for ``principal``."""
        return len(self.sessions) < self.max_sessions and self._per_principal.get(principal, 0) < self.max_per_principal

    def open(self, principal: str) -> LegacySession:
        """A new session for ``principal`` (the caller checked :meth:`admits`)."""
        sid = uuid.uuid4().hex
        replies = Replies()
        standalone = FrameChannel(None, None, PUSH_BACKLOG, wait=False, replies=replies)
        connection = Connection.for_loop(standalone, session_id=sid, protocol_version_hint=LATEST_HANDSHAKE_VERSION)
        session = LegacySession(sid, principal, connection, standalone, replies, anyio.current_time())
        self.sessions[sid] = session
        self._per_principal[principal] = self._per_principal.get(principal, 0) + 1
        _sessions_gauge.add(1)
        return session

    def find(self, sid: str | None, principal: str) -> LegacySession | None:
        """The open session ``sid`` if ``principal`` opened it (else ``None``: 404 either way)."""
        session = self.sessions.get(sid) if sid is not None else None
        if session is None or session.principal != principal:
            return None
        session.last_seen = anyio.current_time()
        return session

    async def close(self, session: LegacySession) -> None:
        """End ``session`` exactly once: out of the table, its streams ended, its connection's
        exit stack unwound (the front door drops its binding)."""
        if session.closed:
            return
        session.closed = True
        self.sessions.pop(session.id, None)
        left = self._per_principal.get(session.principal, 1) - 1
        if left:
            self._per_principal[session.principal] = left
        else:
            self._per_principal.pop(session.principal, None)
        _sessions_gauge.add(-1)
        session.standalone.sink.close()
        with anyio.CancelScope(shield=True):
            await session.connection.exit_stack.aclose()

    async def reap(self, now: float) -> int:
        """Close every session idle (no request, no open stream) for ``idle_s``; returns how many."""
        idle = [s for s in self.sessions.values() if s.streams == 0 and now - s.last_seen >= self.idle_s]
        for session in idle:
            log.info("closing 2025-era session idle for %.0f s", now - session.last_seen)
            await self.close(session)
        return len(idle)

    async def close_all(self) -> None:
        """Shutdown: end every session."""
        for session in list(self.sessions.values()):
            await self.close(session)

    def standalone_stream_open(self, http_session_id: str) -> bool | None:
        """``PushGate``: whether the session's GET stream is open; ``None`` once it is gone."""
        session = self.sessions.get(http_session_id)
        return None if session is None else session.get_open

    def standalone_stream(self, http_session_id: str) -> None:
        """``PushGate``: pushes go through the session's connection (its channel), never direct."""
        return None


async def _plain(send: Send, status: int, body: bytes = b"", *headers: tuple[bytes, bytes]) -> None:
    head = [(b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def _json(send: Send, status: int, message: Mapping[str, Any]) -> None:
    await _plain(send, status, jsonrpc.encode(message), (b"content-type", b"application/json"))


def _error(code: int, message: str) -> dict[str, Any]:
    return jsonrpc.error_message(None, types.ErrorData(code=code, message=message))


class Era2025:
    """The ASGI handler of 2025-era requests on ``/mcp`` (module docstring)."""

    def __init__(self, front: FrontDoor, dispatcher: Dispatcher, table: SessionTable) -> None:
        self._front = front
        self._dispatcher = dispatcher
        self.table = table

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Idle reaping, every tenth of the idle timeout (at least once a second); ends every
        session when cancelled (shutdown)."""
        task_status.started()
        try:
            while True:
                await anyio.sleep(min(1.0, self.table.idle_s / 10))
                await self.table.reap(anyio.current_time())
        finally:
            with anyio.CancelScope(shield=True):
                await self.table.close_all()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request of this era (module docstring)."""
        request = Request(scope, receive)
        identity = scope.get(IDENTITY_KEY)
        if not isinstance(identity, McpIdentity):  # the pipeline admits none without one (fail closed)
            await _plain(send, 401)
            return
        method = scope["method"]
        version = request.headers.get("mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await _json(send, 400, _error(types.INVALID_REQUEST, f"Unsupported protocol version: {version}"))
            return
        if method == "POST":
            await self._post(scope, receive, send, request, identity)
        elif method == "GET":
            await self._get(scope, receive, send, request, identity)
        elif method == "DELETE":
            session = await self._session(send, request, identity)
            if session is not None:
                await self.table.close(session)
                await _plain(send, 200)
        else:
            await _plain(send, 405, b"", (b"allow", b"GET, POST, DELETE"))

    async def _session(self, send: Send, request: Request, identity: McpIdentity) -> LegacySession | None:
        sid = request.headers.get(SESSION_HEADER)
        if sid is None:
            await _json(send, 400, _error(types.INVALID_REQUEST, "Bad Request: Missing session ID"))
            return None
        session = self.table.find(sid, identity.principal)
        if session is None:
            await _json(send, 404, _error(types.INVALID_REQUEST, "Session not found"))
        return session

    async def _post(self, scope: Scope, receive: Receive, send: Send, request: Request, identity: McpIdentity) -> None:
        if not request.headers.get("content-type", "").lower().startswith("application/json"):
            await _plain(send, 400, b"Invalid Content-Type header")
            return
        wants_json, wants_sse = accepts(request.headers)
        if not (wants_json and wants_sse):
            await _json(
                send,
                406,
                _error(
                    types.INVALID_REQUEST,
                    "Not Acceptable: Client must accept both application/json and text/event-stream",
                ),
            )
            return
        message = jsonrpc.decode(await read_body(receive))
        if isinstance(message, jsonrpc.Refusal):
            await _json(send, 400, jsonrpc.error_message(message.id, message.error))
            return
        if isinstance(message, jsonrpc.Call) and message.method == "initialize":
            await self._initialize(send, request, identity, message)
            return
        session = await self._session(send, request, identity)
        if session is None:
            return
        if isinstance(message, jsonrpc.Reply):
            session.replies.deliver(message)  # a late or unknown answer is dropped: no one waits
            await _plain(send, 202)
            return
        if isinstance(message, jsonrpc.Notice):
            await self._notice(session, request, message)
            await _plain(send, 202)
            return
        await self._request(receive, send, request, session, message)

    async def _initialize(self, send: Send, request: Request, identity: McpIdentity, call: jsonrpc.Call) -> None:
        if request.headers.get(SESSION_HEADER) is not None:
            await _json(send, 400, _error(types.INVALID_REQUEST, "Bad Request: the session is already initialized"))
            return
        try:
            params = types.InitializeRequestParams.model_validate(call.params or {}, by_name=False)
        except Exception as exc:
            await _json(send, 400, jsonrpc.error_message(call.id, error_data(exc)))
            return
        if not self.table.admits(identity.principal):
            await _json(send, 503, _error(-32016, "too many open sessions; close one or retry later"))
            return
        session = self.table.open(identity.principal)
        wire = self._dispatcher.initialize(session.connection, params)
        await self._stream_head(send, session)
        await send(
            {
                "type": "http.response.body",
                "body": sse.frame(jsonrpc.result_message(call.id, wire), session.next_event_id()),
                "more_body": False,
            }
        )

    async def _notice(self, session: LegacySession, request: Request, notice: jsonrpc.Notice) -> None:
        if notice.method == "notifications/initialized":
            session.connection.initialized.set()
            ctx = context(session.standalone, session.connection, notice.method, notice.params, None, request)
            try:
                self._front.sessions.binding(ctx)  # bound now, so pushes reach it before its first request
            except Exception:
                log.info("2025-era session: binding refused at the handshake (answered on its first request)")

    async def _stream_head(self, send: Send, session: LegacySession) -> None:
        headers = [*sse.HEADERS, (b"mcp-session-id", session.id.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})

    async def _request(
        self, receive: Receive, send: Send, request: Request, session: LegacySession, call: jsonrpc.Call
    ) -> None:
        channel = FrameChannel(call.id, request, PUSH_BACKLOG, wait=False, replies=session.replies)
        channel.progress_token = progress_token_from_params(call.params)
        ctx = context(channel, session.connection, call.method, call.params, call.id, request)
        answer: list[dict[str, Any]] = []

        async def run() -> None:
            async with channel.sink:
                try:
                    if not session.connection.initialize_accepted:
                        raise MCPError(code=types.INVALID_PARAMS, message="Invalid request parameters", data="")
                    answer.append(jsonrpc.result_message(call.id, await self._dispatcher.request(ctx)))
                except Exception as exc:
                    answer.append(jsonrpc.error_message(call.id, error_data(exc)))

        async def watch_disconnect(scope_: anyio.CancelScope) -> None:
            while (await receive()).get("type") != "http.disconnect":
                pass
            scope_.cancel()

        session.streams += 1
        try:
            await self._stream_head(send, session)
            async with channel.frames, anyio.create_task_group() as tg:
                tg.start_soon(run)
                tg.start_soon(watch_disconnect, tg.cancel_scope)
                await self._pump(send, channel.frames)
                for piece in await sse.frame_sliced(answer[0], session.next_event_id()):  # ADR 0040
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                tg.cancel_scope.cancel()
        finally:
            session.streams -= 1
            session.last_seen = anyio.current_time()

    @staticmethod
    async def _pump(send: Send, frames: MemoryObjectReceiveStream[bytes]) -> None:
        """Write ``frames`` until their channel closes, pinging while idle."""
        while (frame := await next_frame(frames)) is not None:
            await send({"type": "http.response.body", "body": frame, "more_body": True})

    async def _get(self, scope: Scope, receive: Receive, send: Send, request: Request, identity: McpIdentity) -> None:
        if not accepts(request.headers)[1]:
            await _json(
                send, 406, _error(types.INVALID_REQUEST, "Not Acceptable: Client must accept text/event-stream")
            )
            return
        session = await self._session(send, request, identity)
        if session is None:
            return
        if session.get_open:
            await _json(
                send, 409, _error(types.INVALID_REQUEST, "Conflict: Only one SSE stream is allowed per session")
            )
            return
        session.get_open = True
        session.streams += 1
        self._front.notifier.touch()  # pushes held for this stream go now
        try:
            await self._stream_head(send, session)
            async with anyio.create_task_group() as tg:

                async def watch_disconnect() -> None:
                    while (await receive()).get("type") != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(watch_disconnect)
                resume = request.headers.get("last-event-id")
                for kept in session.replay_after(resume) if resume is not None else ():
                    await send({"type": "http.response.body", "body": kept, "more_body": True})
                while (frame := await next_frame(session.standalone.frames)) is not None:
                    # a push gets an id the client can resume from; a keepalive ping does not
                    body = frame if frame is sse.PING else session.remember(frame)
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                tg.cancel_scope.cancel()
        finally:
            session.get_open = False
            session.streams -= 1
            session.last_seen = anyio.current_time()
