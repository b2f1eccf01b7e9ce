"""The 2025-11-25 era on the gateway's data plane: the ``initialize`` handshake, an
``Mcp-Session-Id`` bound to the identity that opened it, request POSTs answered on SSE streams,
the standalone GET stream for pushes, DELETE, and idle reaping — bounded in total and per
principal (I18).

- ``initialize`` (no session header) opens a session when the bounds allow (I18: 503 beyond
  :attr:`SessionTable.max_sessions` in total, 429 beyond :attr:`SessionTable.max_per_client` per
  client — its bearer credential, else its peer address; ``too_many_sessions``, retryable),
  answers the negotiated version and the front door's capabilities, names the session.
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
- Every frame a session sends (GET-stream pushes and each request stream's events) carries an
  event id naming its stream, kept in one bounded history per session (the last
  :data:`EVENT_HISTORY`, I18). A request stream opens with a priming event (2025-11-25). A client
  that drops a request's stream does not cancel the request (``notifications/cancelled`` does):
  the call runs on, its events are kept, and a GET with ``Last-Event-ID`` of one of them replays
  the stream's later events, primes, and follows it live to the response. A GET with the id of a
  GET-stream event replays the pushes after it, primes, then continues live."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp import MCPError
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.mcp_auth import McpIdentity
from mcp_reconciler.api.plane import jsonrpc, sse
from mcp_reconciler.api.plane.channel import ResponseChannel, next_frame
from mcp_reconciler.api.plane.dispatch import Dispatcher, context, error_data
from mcp_reconciler.api.plane.era2026 import accepts
from mcp_reconciler.api.plane.response import LiveResponse, StreamWriter
from mcp_reconciler.api.plane.sessions import GET_STREAM, PUSH_BACKLOG, Event, LegacySession, SessionTable, client_key

log = logging.getLogger("mcp_reconciler.plane")

SESSION_HEADER = "mcp-session-id"
_ACCEPTED = ((b"content-type", b"application/json"),)  # a 202 as the SDK server sends it: typed, empty
_ALLOW = (b"allow", b"GET, POST, DELETE")


async def _plain(send: Send, status: int, body: bytes = b"", *headers: tuple[bytes, bytes]) -> None:
    head = [(b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def _json(send: Send, status: int, message: Mapping[str, Any], *headers: tuple[bytes, bytes]) -> None:
    await _plain(send, status, jsonrpc.encode(message), (b"content-type", b"application/json"), *headers)


@functools.lru_cache(maxsize=256)
def _client_params(raw: bytes) -> types.InitializeRequestParams:
    """The ``initialize`` params of ``raw``, one object per distinct encoding: sessions of the same
    client share it (issue 26: ~1.5 KiB per session otherwise; nothing mutates it once committed
    to a connection). A failed validation raises and is not cached."""
    return types.InitializeRequestParams.model_validate(json.loads(raw), by_name=False)


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

    async def __call__(self, scope: Scope, receive: Receive, send: Send, identity: McpIdentity, body: bytes) -> None:
        """Answer one request of this era (module docstring) that the edge pipeline admitted for
        ``identity``, with its whole ``body``."""
        request = Request(scope, receive)
        method = scope["method"]
        version = request.headers.get("mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await _json(send, 400, _error(types.INVALID_REQUEST, f"Unsupported protocol version: {version}"))
            return
        if method == "POST":
            await self._post(receive, send, request, identity, body)
        elif method == "GET":
            await self._get(scope, receive, send, request, identity)
        elif method == "DELETE":
            session = await self._session(send, request, identity)
            if session is not None:
                await self.table.close(session)
                await _plain(send, 200)
        else:
            await _json(send, 405, _error(types.INVALID_REQUEST, "Method Not Allowed"), _ALLOW)

    async def _session(self, send: Send, request: Request, identity: McpIdentity) -> LegacySession | None:
        sid = request.headers.get(SESSION_HEADER)
        if sid is None:
            await _json(send, 400, _error(types.INVALID_REQUEST, "Bad Request: Missing session ID"))
            return None
        session = self.table.find(sid, identity.principal)
        if session is None:
            await _json(send, 404, _error(types.INVALID_REQUEST, "Session not found"))
        return session

    async def _post(self, receive: Receive, send: Send, request: Request, identity: McpIdentity, raw: bytes) -> None:
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
        message = jsonrpc.decode(raw)
        if isinstance(message, jsonrpc.Refusal):
            await _json(send, 400, jsonrpc.legacy_refusal(raw, message))
            return
        if isinstance(message, jsonrpc.Call) and message.method == "initialize":
            await self._initialize(send, request, identity, message)
            return
        session = await self._session(send, request, identity)
        if session is None:
            return
        if isinstance(message, jsonrpc.Reply):
            session.replies.deliver(message)  # a late or unknown answer is dropped: no one waits
            await _plain(send, 202, b"", *_ACCEPTED)
            return
        if isinstance(message, jsonrpc.Notice):
            await self._notice(session, request, message)
            await _plain(send, 202, b"", *_ACCEPTED)
            return
        await self._request(send, request, session, message)

    async def _initialize(self, send: Send, request: Request, identity: McpIdentity, call: jsonrpc.Call) -> None:
        if request.headers.get(SESSION_HEADER) is not None:
            await _json(send, 400, _error(types.INVALID_REQUEST, "Bad Request: the session is already initialized"))
            return
        try:
            params = _client_params(jsonrpc.encode(call.params or {}))
        except Exception as exc:
            await _json(send, 400, jsonrpc.error_message(call.id, error_data(exc)))
            return
        client = client_key(request.scope)
        refused = self.table.room(client)
        if refused == 503:
            await _json(send, 503, _error(-32016, "too many open sessions; close one or retry later"))
            return
        if refused is not None:
            await _too_many_for_client(send, self.table.max_per_client)
            return
        session = self.table.open(identity.principal, client)
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
        elif notice.method == "notifications/progress":
            await session.replies.progress(notice.params)  # on a request the gateway asked (relay)
        elif notice.method == "notifications/cancelled" and notice.params is not None:
            target = notice.params.get("requestId")
            scope = session.running.get(target) if isinstance(target, str | int) else None
            if scope is not None:
                scope.cancel()  # the request ends without a response (JSON-RPC cancellation)

    async def _stream_head(self, send: Send, session: LegacySession) -> None:
        headers = [*sse.HEADERS, (b"mcp-session-id", session.id.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})

    async def _request(self, send: Send, request: Request, session: LegacySession, call: jsonrpc.Call) -> None:
        """A request's SSE stream (ADR 0042): the operation runs in this task and writes each event
        straight onto the response — no task group, no queue, no disconnect watcher: a client
        that drops the stream does not cancel the request, and a write to it is the ASGI
        server's no-op (its events are kept for a client that resumes)."""
        stream = session.open_stream()
        response = LiveResponse(send)

        async def write(frame: bytes) -> None:  # an event id, kept, handed to a resumed GET, written
            if response.gone:  # answered: a late notification is dropped (the channel's rule)
                raise anyio.ClosedResourceError
            event = session.remember((frame,), stream.key)
            stream.relay(event)
            with contextlib.suppress(OSError):
                await response.frame(b"".join(event))  # one write: whole beside a ping or another emitter

        channel = ResponseChannel(call.id, request, write, session.replies)
        channel.progress_token = progress_token_from_params(call.params)
        answer: dict[str, Any] | None = None
        session.streams += 1
        try:
            with contextlib.suppress(OSError):
                await response.start((b"mcp-session-id", session.id.encode()))
                if str(session.connection.protocol_version) >= "2025-11-25":  # a priming event (the SDK's rule)
                    await response.frame(session.priming(stream.key))
            with response.running(None), anyio.CancelScope() as scope:
                if call.id in session.running:  # a duplicate id in flight: the first one keeps it
                    busy = types.ErrorData(code=types.INVALID_REQUEST, message="this request id is already running")
                    answer = jsonrpc.error_message(call.id, busy)
                else:
                    session.running[call.id] = scope  # notifications/cancelled and the session's end cancel it
                    try:
                        if not session.connection.initialize_accepted:
                            raise MCPError(code=types.INVALID_PARAMS, message="Invalid request parameters", data="")
                        ctx = context(channel, session.connection, call.method, call.params, call.id, request)
                        answer = jsonrpc.result_message(call.id, await self._dispatcher.request(ctx))
                    except Exception as exc:
                        answer = jsonrpc.error_message(call.id, error_data(exc))
                    finally:
                        session.running.pop(call.id, None)
            last: Event = ()
            if answer is not None:  # none when the client cancelled the request
                last = session.remember(await sse.frame_sliced(answer), stream.key)  # in pieces: ADR 0040
                stream.relay(last)
            with contextlib.suppress(OSError):
                await response.end(last)
        finally:
            session.close_stream(stream)
            session.streams -= 1
            session.last_seen = anyio.current_time()

    async def _get(self, scope: Scope, receive: Receive, send: Send, request: Request, identity: McpIdentity) -> None:
        if not accepts(request.headers)[1]:
            await _json(
                send, 406, _error(types.INVALID_REQUEST, "Not Acceptable: Client must accept text/event-stream")
            )
            return
        session = await self._session(send, request, identity)
        if session is None:
            return
        resume = request.headers.get("last-event-id")
        stream, replay = session.replay_after(resume) if resume is not None else (GET_STREAM, [])
        if stream != GET_STREAM:
            await self._resume(receive, send, session, stream, replay)
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
                writer = StreamWriter(send)
                # Pushes are written directly while this stream is idle (push.PushStream);
                # until ready() they queue behind the replay and its priming event.
                push = session.standalone.open_stream(session, writer.write)
                if resume is not None:  # the kept pushes after it, then a priming event
                    for kept in replay:
                        await writer.write(*kept)
                    await writer.write(session.priming(GET_STREAM))
                push.ready()
                while (frame := await next_frame(session.standalone.frames)) is not None:
                    await push.from_backlog(frame)
                await push.settled()  # a direct write the transport held goes before the end
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                tg.cancel_scope.cancel()
        finally:
            session.standalone.close_stream()
            session.get_open = False
            session.streams -= 1
            session.last_seen = anyio.current_time()

    async def _resume(
        self, receive: Receive, send: Send, session: LegacySession, key: int, replay: list[Event]
    ) -> None:
        """A GET resuming request stream ``key``: its kept events after the client's last one, a
        priming event, then its live events up to the response (none once it was answered)."""
        live = session.live.get(key)
        follow: MemoryObjectReceiveStream[Event] | None = None
        if live is not None and live.follower is None:  # one follower per stream (a second replays only)
            sink, follow = anyio.create_memory_object_stream[Event](PUSH_BACKLOG)
            live.follower = sink  # attached before any await: no frame falls between replay and live
        session.streams += 1
        try:
            await self._stream_head(send, session)
            writer = StreamWriter(send)
            for kept in replay:
                await writer.write(*kept)
            await writer.write(session.priming(key))
            if follow is not None:
                async with follow, anyio.create_task_group() as tg:

                    async def watch_disconnect() -> None:
                        while (await receive()).get("type") != "http.disconnect":
                            pass
                        tg.cancel_scope.cancel()

                    tg.start_soon(watch_disconnect)
                    while True:
                        with anyio.move_on_after(sse.PING_INTERVAL_S) as idle:
                            try:
                                event = await follow.receive()
                            except anyio.EndOfStream:
                                break
                        await writer.write(*((sse.PING,) if idle.cancelled_caught else event))
                    tg.cancel_scope.cancel()
            await writer.end()
        finally:
            if live is not None and follow is not None and live.follower is not None:
                live.follower.close()
                live.follower = None
            session.streams -= 1
            session.last_seen = anyio.current_time()


async def _too_many_for_client(send: Send, limit: int) -> None:
    """429 at the per-client bound (I18), retryable."""
    error = {
        "code": types.INVALID_REQUEST,
        "message": f"too many open sessions for this client (at most {limit}); close one and retry",
        "data": {"code": "too_many_sessions", "retryable": True},
    }
    body = jsonrpc.encode({"jsonrpc": "2.0", "id": None, "error": error})
    await _plain(send, 429, body, (b"content-type", b"application/json"), (b"retry-after", b"1"))
