"""The 2026-07-28 era on the gateway's data plane: one self-contained POST, one JSON-RPC
request, one response — no handshake, no ``Mcp-Session-Id``.

The order of checks is the SDK server's (the oracle tests compare them): ``Content-Type`` (400),
method (405, ``Allow: POST``), ``Accept`` (406: both JSON and SSE), the body (``jsonrpc``:
parse error, batch, malformed envelope), a notification (202, dropped: this era has no
client-to-server notifications over HTTP; a cancel is closing the stream), a routing header sent
twice, the envelope ladder (``MCP-Protocol-Version`` and ``_meta`` version/capabilities,
``Mcp-Method``/``Mcp-Name`` against the body: ``HeaderMismatch``), ``Mcp-Param-*`` headers of
a ``tools/call`` against the tool's schema (looked up in O(1), and only for a tool whose schema
annotates arguments: ``Listing.param_header_schema``). Then the request runs through the
dispatcher, on a ``Connection`` made from the request's envelope (:class:`Envelopes`: the typed
client info and capabilities of an envelope seen before are reused, not validated again).

The response is ``application/json`` when the operation finishes without emitting anything
(errors keep their protocol status: 404 for an unknown method, 400 for bad params), and
``text/event-stream`` as soon as it emits a notification (progress, log records, a listen
stream's events) or has run :data:`~api.plane.sse.PING_INTERVAL_S` silently — from then on the
stream is pinged so a proxy's idle timeout cannot cut it. The client closing its connection
cancels the operation (that is cancellation in this era)."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

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
from mcp_reconciler.api.plane.channel import ResponseChannel
from mcp_reconciler.api.plane.dispatch import Dispatcher, context, error_data
from mcp_reconciler.api.plane.push import ListenChannel
from mcp_reconciler.api.plane.response import LiveResponse, reply, respond
from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.projection_text import memo_put

log = logging.getLogger("mcp_reconciler.plane")

LISTEN = "subscriptions/listen"

#: Requests answered, by outcome: a tally read when metrics are collected — an SDK
#: ``Counter.add`` per request (attributes hashed, views matched) was ~2 % of a forwarded call's
#: CPU (ADR 0041).
_answered = telemetry.Tally("plane.requests", "Requests the gateway's data plane answered, by era and outcome")
_OUTCOMES = {o: {"era": "2026", "outcome": o} for o in ("malformed", "rejected", "sse", "json")}

#: Typed envelopes kept (:class:`Envelopes`); distinct client info/capabilities pairs are few.
ENVELOPES_KEPT = 256
#: The longest envelope key kept (characters of its ``repr``): a client may send a body-sized
#: envelope; such a one is validated every time rather than held (at most 256 keys of 4 KiB kept).
ENVELOPE_KEY_MAX = 4096


class Envelopes:
    """The typed client info and capabilities of a request's envelope, validated once per
    distinct envelope: ``Connection.from_envelope`` validates three pydantic models per request
    (~4 % of a forwarded call's CPU in ADR 0041's profile), while a client sends the same
    envelope on every request. Keyed by the raw values' ``repr`` (JSON-decoded: equal repr,
    equal value); at most :data:`ENVELOPES_KEPT` kept, the oldest evicted first (a client
    varying its envelope only misses), none whose key is over ``key_max`` characters. The
    models are shared by the requests of one envelope and read only (the gateway never writes
    a connection's client params)."""

    def __init__(self, kept: int = ENVELOPES_KEPT, key_max: int = ENVELOPE_KEY_MAX) -> None:
        self._kept = kept
        self._key_max = key_max
        self._typed: OrderedDict[str, tuple[Any, Any, Any]] = OrderedDict()

    def connection(self, version: str, client_info: Any, client_capabilities: Any) -> Connection:
        """A born-ready connection for this envelope, as ``Connection.from_envelope`` makes it."""
        key = repr((version, client_info, client_capabilities))
        typed = self._typed.get(key)
        if typed is None:
            made = Connection.from_envelope(version, client_info, client_capabilities)
            if len(key) > self._key_max:
                return made  # too big to hold: validated every time
            memo_put(self._typed, key, (made.outbound, made.client_params, made.client_capabilities), self._kept)
            return made
        outbound, params, capabilities = typed  # outbound: from_envelope's no-channel sentinel
        connection = Connection(outbound, protocol_version=version, client_params=params)
        connection.client_capabilities = capabilities  # what from_envelope does after validating
        connection.initialized.set()
        return connection


async def _refuse(send: Send, id_: types.RequestId | None, rejection: InboundLadderRejection) -> None:
    error = types.ErrorData(code=rejection.code, message=rejection.message, data=rejection.data)
    await reply(send, jsonrpc.error_message(id_, error))


def header_map(scope: Scope) -> dict[str, str]:
    """The request's headers as a plain dict (names lower-case, as ASGI gives them), the first
    value of a repeated one kept — what Starlette's ``Headers`` lookup answers, built once
    instead of a scan of the header list per lookup (ADR 0038, "Call CPU")."""
    out: dict[str, str] = {}
    for key, value in reversed(scope["headers"]):
        out[key.decode("latin-1")] = value.decode("latin-1")
    return out


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
        self._envelopes = Envelopes()

    async def __call__(self, scope: Scope, receive: Receive, send: Send, body: bytes) -> None:
        """Answer one request with its whole ``body``, as the edge pipeline admitted it (module
        docstring gives the order of checks)."""
        request = Request(scope, receive)
        headers = header_map(scope)
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
            _answered.add(_OUTCOMES["malformed"])
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
        verdict = classify_inbound_request(message.raw, headers=headers)
        if isinstance(verdict, InboundLadderRejection):
            _answered.add(_OUTCOMES["rejected"])
            await _refuse(send, message.id, verdict)
            return
        rejection = self._param_headers(message, headers, request)
        if rejection is not None:
            await _refuse(send, message.id, rejection)
            return
        await self._serve(receive, send, request, message, verdict.protocol_version, verdict)

    def _param_headers(
        self, message: jsonrpc.Call, headers: Mapping[str, str], request: Request
    ) -> InboundLadderRejection | None:
        """``Mcp-Param-*`` headers of a ``tools/call`` checked against the tool's schema (on the
        raw header list: a repeated ``Mcp-Param-*`` header is a mismatch, a dict would hide it)."""
        if message.method != "tools/call" or message.params is None:
            return None
        name, arguments = message.params.get("name"), message.params.get("arguments")
        if not isinstance(name, str) or not (arguments is None or isinstance(arguments, Mapping)):
            return None
        if not arguments and not any(h.startswith("mcp-param-") for h in headers):
            return None
        schema = self._front.listing.param_header_schema(name)  # None: no annotation, nothing to check
        return validate_mcp_param_headers(schema, arguments or {}, request.headers) if schema is not None else None

    async def _serve(
        self,
        receive: Receive,
        send: Send,
        request: Request,
        message: jsonrpc.Call,
        version: str,
        verdict: Any,
    ) -> None:
        connection = self._envelopes.connection(version, verdict.client_info, verdict.client_capabilities)
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
            _answered.add(_OUTCOMES["sse" if response.streaming else "json"])
            await response.finish(answer)

    async def _listen(
        self, request: Request, message: jsonrpc.Call, connection: Connection, response: LiveResponse
    ) -> dict[str, Any]:
        """A listen stream: its channel writes onto the response itself (``push.ListenChannel``:
        the acknowledgement and backlog frames from this task, the bus's events directly from
        the publisher's pass when the stream is idle) — no queue, no pump task."""
        channel = ListenChannel(message.id, request, response)
        ctx = context(channel, connection, message.method, message.params, message.id, request)
        try:
            result = await self._dispatcher.request(ctx)
            await channel.stream.settled()  # the answer is the last frame: after a write in flight
        finally:
            channel.stream.close()
        return result


def is_modern(scope: Scope) -> bool:
    """Whether a request belongs to this era's handler: its ``MCP-Protocol-Version`` header names
    anything but a handshake-era version (an unknown value is this handler's to refuse, as the
    SDK server does)."""
    for key, value in scope["headers"]:
        if key == b"mcp-protocol-version":
            return value.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS
    return False
