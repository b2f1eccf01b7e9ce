"""The 2026-07-28 era on the gateway's data plane: one self-contained POST, one JSON-RPC
request, one response — no handshake, no ``Mcp-Session-Id``.

The order of checks is the SDK server's (the oracle tests compare them): ``Content-Type`` (400),
method (405, ``Allow: POST``), ``Accept`` (406: both JSON and SSE), the body (``jsonrpc``:
parse error, batch, malformed envelope), a notification (202, dropped: this era has no
client-to-server notifications over HTTP; a cancel is closing the stream), a routing header sent
twice, the envelope ladder (``MCP-Protocol-Version`` and ``_meta`` version/capabilities,
``Mcp-Method``/``Mcp-Name`` against the body: ``HeaderMismatch``), ``Mcp-Param-*`` headers of
a ``tools/call`` against the tool's schema (looked up in O(1),
``Listing.tool_input_schema``). Then the request runs through the dispatcher.

The response is ``application/json`` when the operation finishes without emitting anything
(errors keep their protocol status: 404 for an unknown method, 400 for bad params), and
``text/event-stream`` as soon as it emits a notification (progress, log records, a listen
stream's events) or has run :data:`~api.plane.sse.PING_INTERVAL_S` silently — from then on the
stream is pinged so a proxy's idle timeout cannot cut it. The client closing its connection
cancels the operation (that is cancellation in this era)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server.connection import Connection
from mcp.shared.inbound import (
    InboundLadderRejection,
    classify_inbound_request,
    find_duplicated_routing_header,
    unsupported_protocol_version_rejection,
    validate_mcp_param_headers,
)
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.plane import jsonrpc
from mcp_reconciler.api.plane.channel import FrameChannel, ResponseChannel
from mcp_reconciler.api.plane.dispatch import Dispatcher, context, error_data
from mcp_reconciler.api.plane.response import LiveResponse, reply, respond
from mcp_reconciler.reconciler import telemetry

log = logging.getLogger("mcp_reconciler.plane")

LISTEN = "subscriptions/listen"

_requests = telemetry.meter.create_counter(
    "plane.requests", description="Requests the gateway's data plane answered, by era and outcome"
)


async def _refuse(send: Send, id_: types.RequestId | None, rejection: InboundLadderRejection) -> None:
    error = types.ErrorData(code=rejection.code, message=rejection.message, data=rejection.data)
    await reply(send, jsonrpc.error_message(id_, error))


def accepts(headers: Mapping[str, str]) -> tuple[bool, bool]:
    """``(json, sse)``: whether the ``Accept`` header admits each (RFC 9110 wildcards)."""
    kinds = {part.split(";")[0].strip().lower() for part in headers.get("accept", "").split(",")}
    anything = "*/*" in kinds
    return (
        anything or bool(kinds & {"application/json", "application/*"}),
        anything or bool(kinds & {"text/event-stream", "text/*"}),
    )


class Era2026:
    """The ASGI handler of 2026-era requests on ``/mcp`` (module docstring)."""

    def __init__(self, front: FrontDoor, dispatcher: Dispatcher) -> None:
        self._front = front
        self._dispatcher = dispatcher

    async def __call__(self, scope: Scope, receive: Receive, send: Send, body: bytes) -> None:
        """Answer one request with its whole ``body``, as the edge pipeline admitted it (module
        docstring gives the order of checks)."""
        request = Request(scope, receive)
        headers = request.headers
        method = scope["method"]
        if method == "POST" and not headers.get("content-type", "").lower().startswith("application/json"):
            await respond(send, 400, b"Invalid Content-Type header", None)
            return
        if method != "POST":
            await respond(send, 405, b"", None, (b"allow", b"POST"))
            return
        wants_json, wants_sse = accepts(headers)
        if not (wants_json and wants_sse):
            await respond(send, 406, b"", None)
            return
        message = jsonrpc.decode(body)
        if isinstance(message, jsonrpc.Reply):  # this era sends no requests: nothing is owed
            message = jsonrpc.Refusal(None, types.ErrorData(code=types.INVALID_REQUEST, message=jsonrpc.INVALID_BODY))
        if isinstance(message, jsonrpc.Refusal):
            _requests.add(1, {"era": "2026", "outcome": "malformed"})
            await reply(send, jsonrpc.error_message(message.id, message.error))
            return
        if isinstance(message, jsonrpc.Notice):
            unsupported = unsupported_protocol_version_rejection(headers.get("mcp-protocol-version", ""))
            if unsupported is not None:
                await _refuse(send, None, unsupported)
                return
            await respond(send, 202, b"", None)  # acknowledged and dropped (module docstring)
            return
        duplicated = find_duplicated_routing_header((k.decode("latin-1"), v) for k, v in scope["headers"])
        if duplicated is not None:
            mismatch = InboundLadderRejection(types.HEADER_MISMATCH, f"{duplicated} header appears more than once")
            await _refuse(send, message.id, mismatch)
            return
        verdict = classify_inbound_request(message.raw, headers=dict(headers))
        if isinstance(verdict, InboundLadderRejection):
            _requests.add(1, {"era": "2026", "outcome": "rejected"})
            await _refuse(send, message.id, verdict)
            return
        rejection = self._param_headers(message, headers)
        if rejection is not None:
            await _refuse(send, message.id, rejection)
            return
        await self._serve(receive, send, request, message, verdict.protocol_version, verdict)

    def _param_headers(self, message: jsonrpc.Call, headers: Mapping[str, str]) -> InboundLadderRejection | None:
        """``Mcp-Param-*`` headers of a ``tools/call`` checked against the tool's schema."""
        if message.method != "tools/call" or message.params is None:
            return None
        name, arguments = message.params.get("name"), message.params.get("arguments")
        if not isinstance(name, str) or not (arguments is None or isinstance(arguments, Mapping)):
            return None
        if not arguments and not any(h.startswith("mcp-param-") for h in headers):
            return None
        schema = self._front.listing.tool_input_schema(name)
        return validate_mcp_param_headers(schema, arguments or {}, headers) if schema is not None else None

    async def _serve(
        self,
        receive: Receive,
        send: Send,
        request: Request,
        message: jsonrpc.Call,
        version: str,
        verdict: Any,
    ) -> None:
        connection = Connection.from_envelope(version, verdict.client_info, verdict.client_capabilities)
        response = LiveResponse(send)
        answer: dict[str, Any] | None = None
        with response.running(receive):  # the client leaving cancels the operation
            try:
                if message.method == LISTEN:
                    result = await self._listen(request, message, connection, response)
                else:
                    channel = ResponseChannel(message.id, request, response.frame)
                    channel.progress_token = progress_token_from_params(message.params)
                    ctx = context(channel, connection, message.method, message.params, message.id, request)
                    result = await self._dispatcher.request(ctx)
                answer = jsonrpc.result_message(message.id, result)
            except Exception as exc:
                answer = jsonrpc.error_message(message.id, error_data(exc))
            finally:
                await connection.exit_stack.aclose()
        if answer is not None:  # none when the client left (the operation was cancelled)
            _requests.add(1, {"era": "2026", "outcome": "sse" if response.streaming else "json"})
            await response.finish(answer)

    async def _listen(
        self, request: Request, message: jsonrpc.Call, connection: Connection, response: LiveResponse
    ) -> dict[str, Any]:
        """A listen stream: its events come from the bus (``ListenStreams.publish`` hands encoded
        frames to the stream's ``sink`` without waiting), so its channel is a queue, pumped onto
        the response by a task of its own until the operation answers."""
        channel = FrameChannel(message.id, request, 0, wait=True)
        ctx = context(channel, connection, message.method, message.params, message.id, request)

        async def pump() -> None:
            async for frame in channel.frames:
                with contextlib.suppress(anyio.ClosedResourceError):
                    await response.frame(frame)

        failed: Exception | None = None
        async with channel.frames, anyio.create_task_group() as tg:
            tg.start_soon(pump)
            async with channel.sink:  # closed when it answers: the pump writes what is left, then ends
                try:
                    result = await self._dispatcher.request(ctx)
                except Exception as exc:  # raised as itself, not inside the group's ExceptionGroup
                    failed = exc
        if failed is not None:
            raise failed
        return result


def is_modern(scope: Scope) -> bool:
    """Whether a request belongs to this era's handler: its ``MCP-Protocol-Version`` header names
    anything but a handshake-era version (an unknown value is this handler's to refuse, as the
    SDK server does)."""
    for key, value in scope["headers"]:
        if key == b"mcp-protocol-version":
            return value.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS
    return False
