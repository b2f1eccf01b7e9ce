"""The data plane on stdio: the same dispatcher as ``/mcp``, over newline-delimited JSON-RPC on
a byte stream pair (the gateway's stdin and stdout).

One client, the local user (``ctx.request`` is ``None``: the front door's local identity).
Both eras, as the SDK's dual-era loop serves them (``mcp.server.runner.serve_dual_era_loop``):
the client's first request decides the connection's era, once. A request carrying the
2026-07-28 ``_meta`` envelope (other than ``initialize``) opens a 2026 connection: every request
passes the SDK's envelope ladder (``classify_inbound_request``) and is served on a connection
built from its own envelope, and a later ``initialize`` gets ``UNSUPPORTED_PROTOCOL_VERSION``
naming the served versions (so a client whose ``server/discover`` probe timed out re-probes
instead of settling for the handshake era). Anything else opens the handshake session:
``initialize`` first (a request before it is refused with ``INVALID_PARAMS``, as the SDK server
does), an enveloped request is refused with ``INVALID_REQUEST``, ``notifications/initialized``
binds the session so pushes reach it at once. Each request runs in its own task (a slow call
never holds up a ``ping``); ``notifications/cancelled`` cancels the request it names.
Notifications an operation emits and pushes are written as lines; one lock keeps every line
whole.

The relay's server→client requests (sampling, elicitation, roots) go out as lines under their
own ids; the client's response lines are handed to the session's ``Replies``.

A line over the input bound (``api/stdio_input.py``, I18) arrives as a
:class:`~reconciler.stdio_peer.Refused`: a request it names gets ``INVALID_REQUEST`` naming the
bound, a response it names fails the gateway's request waiting on it, anything else is logged;
the session goes on."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server.connection import Connection
from mcp.shared.inbound import InboundLadderRejection, InboundModernRoute, classify_inbound_request
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.plane import jsonrpc
from mcp_reconciler.api.plane.channel import Channel, Replies
from mcp_reconciler.api.plane.dispatch import Dispatcher, context, error_data
from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.stdio_peer import Refused, envelope

log = logging.getLogger("mcp_reconciler.plane")

_refused = telemetry.meter.create_counter(
    "plane.stdio.lines_refused", description="stdio lines refused at the line bound (gateway.limits.body_bytes)"
)

Write = Callable[[bytes], Awaitable[None]]


class LineChannel(Channel):
    """A channel onto stdout (``api/plane/channel.py``): every message is one line."""

    def __init__(self, write: Write, replies: Replies | None, request_id: types.RequestId | None = None) -> None:
        super().__init__(request_id, replies)
        self._write = write
        self.message_metadata = ServerMessageMetadata()
        self.transport = TransportContext(kind="stdio", can_send_request=replies is not None)

    async def emit(self, message: dict[str, Any]) -> None:
        """One line on stdout."""
        await self._write(jsonrpc.encode(message) + b"\n")


def _has_envelope(params: Mapping[str, Any] | None) -> bool:
    """Whether ``params._meta`` carries the 2026-07-28 protocol-version key (the SDK's era signal)."""
    meta = params.get("_meta") if params else None
    return isinstance(meta, Mapping) and types.PROTOCOL_VERSION_META_KEY in meta


def _era_refusal(modern: bool, call: jsonrpc.Call) -> types.ErrorData | None:
    """The error a request of the other era gets on this connection (the SDK server's)."""
    if modern and call.method == "initialize":
        requested = (call.params or {}).get("protocolVersion")
        data: dict[str, Any] = {"supported": list(MODERN_PROTOCOL_VERSIONS)}
        if isinstance(requested, str):
            data["requested"] = requested
        return types.ErrorData(
            code=types.UNSUPPORTED_PROTOCOL_VERSION,
            message="connection is serving the 2026-07-28 protocol; the initialize handshake is not accepted",
            data=data,
        )
    if not modern and call.method != "initialize" and _has_envelope(call.params):
        return types.ErrorData(
            code=types.INVALID_REQUEST,
            message="this connection serves the handshake protocol era; "
            "requests carrying the 2026-07-28 envelope are not accepted on it",
        )
    return None


def _admit(modern: bool, call: jsonrpc.Call) -> tuple[types.ErrorData | None, InboundModernRoute | None]:
    """The refusal ``call`` gets on a connection of this era, or (2026) its envelope's route."""
    refusal = _era_refusal(modern, call)
    if refusal is not None or not modern:
        return refusal, None
    route = classify_inbound_request(call.raw)
    if isinstance(route, InboundLadderRejection):
        return types.ErrorData(code=route.code, message=route.message, data=route.data), None
    return None, route


class StdioPlane:
    """Serves one stdio client with ``front``'s operations (module docstring)."""

    def __init__(self, front: FrontDoor) -> None:
        self._front = front
        self._dispatcher = Dispatcher(front)

    async def serve(self, lines: AsyncIterator[bytes | Refused], write_out: Write) -> None:
        """Serve until ``lines`` ends (stdin's EOF); then every request still running is
        cancelled and the session's connection is closed (its binding goes, I14)."""
        lock = anyio.Lock()

        async def write(data: bytes) -> None:
            async with lock:
                await write_out(data)

        replies = Replies()
        standalone = LineChannel(write, replies)
        connection = Connection.for_loop(standalone)
        running: dict[types.RequestId, anyio.CancelScope] = {}
        modern: bool | None = None  # the era, decided by the first request
        try:
            async with anyio.create_task_group() as tg:
                async for line in lines:
                    if isinstance(line, Refused):
                        await self._refuse(line, replies, write)
                        continue
                    if not line.strip():
                        continue
                    message = jsonrpc.decode(line)
                    if isinstance(message, jsonrpc.Reply):
                        replies.deliver(message)
                    elif isinstance(message, jsonrpc.Refusal):
                        await write(jsonrpc.encode(jsonrpc.error_message(message.id, message.error)) + b"\n")
                    elif isinstance(message, jsonrpc.Notice) and message.method == "notifications/progress":
                        await replies.progress(message.params)  # on a request the gateway asked (relay)
                    elif isinstance(message, jsonrpc.Notice):
                        self._notice(connection, standalone, message, running)
                    if not isinstance(message, jsonrpc.Call):
                        continue
                    if modern is None:
                        modern = message.method != "initialize" and _has_envelope(message.params)
                    refusal, route = _admit(modern, message)
                    if refusal is not None:
                        await write(jsonrpc.encode(jsonrpc.error_message(message.id, refusal)) + b"\n")
                    elif message.method == "initialize":
                        await write(jsonrpc.encode(self._initialize(connection, message)) + b"\n")
                    else:
                        scope = anyio.CancelScope()
                        running[message.id] = scope
                        tg.start_soon(self._request, connection, replies, message, route, write, scope, running)
                tg.cancel_scope.cancel()  # stdin ended: nothing left to answer
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await connection.exit_stack.aclose()
                finally:
                    self._front.sessions.connection_closed(connection)  # its binding and session go

    async def _refuse(self, refused: Refused, replies: Replies, write: Write) -> None:
        """Answer what a line over the bound names (module docstring)."""
        head = envelope(refused.prefix)
        error = types.ErrorData(
            code=types.INVALID_REQUEST,
            message=f"message too large: lines are limited to {refused.limit} bytes ({refused.bound})",
        )
        log.warning("stdio: a line over %s (%d bytes) was refused", refused.bound, refused.limit)
        _refused.add(1, {"bound": refused.bound})
        if head.id is None:
            return  # a notification, or unattributable: nothing is owed back
        if head.has_method:
            await write(jsonrpc.encode(jsonrpc.error_message(head.id, error)) + b"\n")
        else:  # the client's answer to a request of ours: that request fails now
            replies.deliver(jsonrpc.Reply(head.id, None, error.model_dump(by_alias=True, exclude_none=True)))

    def _initialize(self, connection: Connection, call: jsonrpc.Call) -> dict[str, Any]:
        try:
            params = types.InitializeRequestParams.model_validate(call.params or {}, by_name=False)
        except Exception as exc:
            return jsonrpc.error_message(call.id, error_data(exc))
        return jsonrpc.result_message(call.id, self._dispatcher.initialize(connection, params))

    def _notice(
        self,
        connection: Connection,
        standalone: LineChannel,
        notice: jsonrpc.Notice,
        running: Mapping[types.RequestId, anyio.CancelScope],
    ) -> None:
        if notice.method == "notifications/initialized":
            connection.initialized.set()
            ctx = context(standalone, connection, notice.method, notice.params, None, None)
            try:
                self._front.sessions.binding(ctx)  # bound now, so pushes reach it before its first request
            except MCPError:
                log.info("stdio: binding refused at the handshake (answered on the first request)")
        elif notice.method == "notifications/cancelled" and notice.params is not None:
            target = notice.params.get("requestId")
            scope = running.get(target) if isinstance(target, str | int) else None
            if scope is not None:
                scope.cancel()

    async def _request(
        self,
        connection: Connection,
        replies: Replies,
        call: jsonrpc.Call,
        route: InboundModernRoute | None,
        write: Write,
        scope: anyio.CancelScope,
        running: dict[types.RequestId, anyio.CancelScope],
    ) -> None:
        channel = LineChannel(write, replies if route is None else None, call.id)  # 2026: no back-channel
        channel.progress_token = progress_token_from_params(call.params)
        if route is not None:  # a 2026-07-28 request: its own connection, from its envelope
            conn = Connection.from_envelope(route.protocol_version, route.client_info, route.client_capabilities)
        else:
            conn = connection
        ctx = context(channel, conn, call.method, call.params, call.id, None)
        answer: dict[str, Any] | None = None
        with scope:
            try:
                if not conn.initialize_accepted:
                    raise MCPError(code=types.INVALID_PARAMS, message="Invalid request parameters", data="")
                answer = jsonrpc.result_message(call.id, await self._dispatcher.request(ctx))
            except Exception as exc:
                answer = jsonrpc.error_message(call.id, error_data(exc))
            finally:
                running.pop(call.id, None)
                if conn is not connection:
                    await conn.exit_stack.aclose()
        if answer is not None:  # a cancelled request gets no response (JSON-RPC cancellation)
            line = await jsonrpc.encode_sliced(answer)  # in slices, whatever its size (ADR 0040)
            line.append(b"\n")
            await write(b"".join(line))
