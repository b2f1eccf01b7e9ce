"""The data plane on stdio: the same dispatcher as ``/mcp``, over newline-delimited JSON-RPC on
a byte stream pair (the gateway's stdin and stdout).

One client, the local user (``ctx.request`` is ``None``: the front door's local identity).
Both eras, as the SDK's dual-era loop serves them: a request whose ``_meta`` names a 2026-07-28
protocol version is served on its own connection built from that envelope; anything else
belongs to the handshake session — ``initialize`` first (a request before it is refused with
``INVALID_PARAMS``, as the SDK server does), ``notifications/initialized`` binds the session so
pushes reach it at once. Each request runs in its own task (a slow call never holds up a
``ping``); ``notifications/cancelled`` cancels the request it names. Notifications an operation
emits and pushes are written as lines; one lock keeps every line whole.

The relay's server→client requests (sampling, elicitation, roots) go out as lines under their
own ids; the client's response lines are handed to the session's ``Replies``."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server.connection import Connection
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.plane import jsonrpc
from mcp_reconciler.api.plane.channel import Channel, Replies
from mcp_reconciler.api.plane.dispatch import Dispatcher, context, error_data

log = logging.getLogger("mcp_reconciler.plane")

Write = Callable[[bytes], Awaitable[None]]
_VERSION_META = "io.modelcontextprotocol/protocolVersion"


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


def _modern_version(params: Mapping[str, Any] | None) -> str | None:
    meta = params.get("_meta") if params else None
    version = meta.get(_VERSION_META) if isinstance(meta, Mapping) else None
    return version if version in MODERN_PROTOCOL_VERSIONS else None


class StdioPlane:
    """Serves one stdio client with ``front``'s operations (module docstring)."""

    def __init__(self, front: FrontDoor) -> None:
        self._front = front
        self._dispatcher = Dispatcher(front)

    async def serve(self, lines: AsyncIterator[bytes], write_out: Write) -> None:
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
        try:
            async with anyio.create_task_group() as tg:
                async for line in lines:
                    if not line.strip():
                        continue
                    message = jsonrpc.decode(line)
                    if isinstance(message, jsonrpc.Reply):
                        replies.deliver(message)
                    elif isinstance(message, jsonrpc.Refusal):
                        await write(jsonrpc.encode(jsonrpc.error_message(message.id, message.error)) + b"\n")
                    elif isinstance(message, jsonrpc.Notice):
                        self._notice(connection, standalone, message, running)
                    elif message.method == "initialize":
                        await write(jsonrpc.encode(self._initialize(connection, message)) + b"\n")
                    else:
                        scope = anyio.CancelScope()
                        running[message.id] = scope
                        tg.start_soon(self._request, connection, replies, message, write, scope, running)
                tg.cancel_scope.cancel()  # stdin ended: nothing left to answer
        finally:
            with anyio.CancelScope(shield=True):
                await connection.exit_stack.aclose()

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
        write: Write,
        scope: anyio.CancelScope,
        running: dict[types.RequestId, anyio.CancelScope],
    ) -> None:
        version = _modern_version(call.params)
        channel = LineChannel(write, replies if version is None else None, call.id)  # 2026: no back-channel
        channel.progress_token = progress_token_from_params(call.params)
        if version is not None:  # a 2026-07-28 request: its own connection, from its envelope
            meta = (call.params or {}).get("_meta", {})
            conn = Connection.from_envelope(
                version,
                meta.get("io.modelcontextprotocol/clientInfo"),
                meta.get("io.modelcontextprotocol/clientCapabilities"),
            )
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
