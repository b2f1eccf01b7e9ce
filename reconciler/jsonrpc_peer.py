"""The gateway's own JSON-RPC session with one upstream, for every transport but legacy SSE's
client (issue 25, ADR 0037).

A :class:`PeerSession` is what an :class:`~reconciler.upstream.UpstreamConnection` speaks
through once connected: requests and their responses, notifications both ways, the server's
own requests, ``subscriptions/listen`` streams, and the handshake that picks the era. The
session layer (ids, stamping, timeouts, cancellation, progress, inbound dispatch, listen routes)
is here, once; a subclass supplies the wire: :class:`StreamSession` a message channel (our stdio
channel, ``reconciler/stdio_peer.py``; the SDK's SSE transport; an in-process server's memory
streams), :class:`~reconciler.http_peer.HttpPeer` the streamable-HTTP peer of ADR 0030.

Guarantees of a :class:`JsonRpcPeer` (``tests/integration/test_peer_contract.py`` checks each
per transport and era, with the SDK's own client as the oracle):

1. **Correlation.** Every request gets an id unique on the connection; its response (result or
   error) reaches exactly the caller that sent it, whatever the order of answers. A response to
   an id nobody waits for (late, after a timeout or cancellation) is dropped.
2. **Progress in the caller's task, in order.** With ``on_progress`` the request carries a
   progress token (its id) and that token's ``notifications/progress`` reach ``on_progress`` in
   arrival order, awaited in the caller's task, before the result.
3. **Cancellation both ways.** A caller cancelled (its scope, a timeout) stops waiting at once
   and the upstream is told: ``notifications/cancelled`` on stream wires and the 2025 HTTP
   era, the request's stream closed on the 2026 HTTP wire — bounded by :data:`CANCEL_NOTICE_S`.
   The server's ``notifications/cancelled`` for one of *its* requests cancels the task
   answering it.
4. **The server's requests are answered.** ``ping`` at once; sampling, elicitation and roots by
   :class:`Inbound` (the connection's handlers, which reach the front door), each in a task of
   its own (HTTP 2025: in a copy of the calling task's context when it arrived on a call's
   stream), never blocking the read loop; an answer always goes back, an error if the handler
   fails.
5. **Bounded tables.** At most :data:`MAX_PENDING` requests wait for answers and at most
   :data:`MAX_INBOUND` server requests or notifications are being handled per connection;
   past either, the request is refused (``MCPError``), the server's request answered with an
   error, the notification dropped (logged). Messages themselves are bounded by the wire
   (``limits.upstream_message_bytes``, ADR 0025).
6. **Validation of what the gateway reads.** The handshake's results are validated with
   ``mcp_types``; other results are returned as parsed JSON (callers type what they read,
   :meth:`~reconciler.upstream.UpstreamConnection.check`).
7. **Ends are observed.** When the wire ends, every waiting request fails (stream wires:
   ``MCPError`` ``CONNECTION_CLOSED``, as the SDK's session fails them; HTTP: the exchange's
   :class:`~reconciler.errors.UpstreamUnavailableError`), every listen stream ends as lost, and
   ``on_end`` runs once."""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp import MCPError
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    encode_header_value,
)
from mcp.shared.message import SessionMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.errors import UpstreamUnavailableError
from mcp_reconciler.reconciler.fasthttp import ResponseError
from mcp_reconciler.reconciler.peer_contract import MessageBoundError

log = logging.getLogger("mcp_reconciler.upstream")

#: Requests waiting for their answers on one connection, and server requests/notifications being
#: handled at once (guarantee 5). Far above what a connection serves (the front door's limits,
#: ADR 0033, cap calls much lower); a bound, so a stalled upstream cannot grow them without end.
MAX_PENDING = 4096
MAX_INBOUND = 256
#: Progress notifications queued for one request before its caller takes them (more are dropped).
MAX_QUEUED_PROGRESS = 256
#: How long telling the upstream that a request is cancelled may take (best effort).
CANCEL_NOTICE_S = 2.0
#: The handshake's own deadline per request (the connection's connect deadline encloses it).
HANDSHAKE_TIMEOUT_S = 10.0
#: Events of one listen stream not yet taken by its consumer (more end the stream as lost,
#: like the SDK's backlog bound: the consumer re-lists).
MAX_LISTEN_BACKLOG = 1024
#: The ``_meta`` key a listen stream's notifications carry their subscription's id under.
SUBSCRIPTION_ID_META_KEY = "io.modelcontextprotocol/subscriptionId"

CLIENT_INFO = types.Implementation(name="mcp-reconciler", version="1")
_CLIENT_INFO_WIRE = CLIENT_INFO.model_dump(by_alias=True, mode="json", exclude_none=True)

_listen_ids = itertools.count(1)

_requests = telemetry.Tally(
    "upstream.session.requests", "Requests sent to upstreams by the gateway's own JSON-RPC session, by method"
)


class Inbound(Protocol):
    """What a session hands the traffic its server starts to (the connection's handlers)."""

    async def serve(self, request: dict[str, Any]) -> dict[str, Any]:
        """Answer one server→client request (its JSON-RPC message) with the wire response or error."""
        ...

    async def notification(self, message: dict[str, Any]) -> None:
        """One server notification (not progress for a request, not a listen stream's own)."""
        ...


#: Receives, in the caller's task, each message that is about one request (its progress).
OnMessage = Callable[[dict[str, Any]], Awaitable[None]]
ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]


class JsonRpcPeer(Protocol):
    """One connected upstream's session (see the module docstring for the guarantees)."""

    protocol_version: str
    capabilities: types.ServerCapabilities

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        timeout_s: float | None = None,
        on_progress: ProgressFn | None = None,
        param_headers: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Send a request and return its raw result. ``MCPError`` for an error answer or a
        timeout (``REQUEST_TIMEOUT``), :class:`MessageBoundError` at a bound,
        :class:`UpstreamUnavailableError` when the wire breaks. ``param_headers``: a
        ``tools/call``'s ``Mcp-Param-*`` headers, sent in the 2026 era (HTTP only)."""
        ...

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        """Send a notification (best effort: a broken wire is logged, not raised)."""
        ...

    def listen(self, notifications: types.SubscriptionFilter) -> AbstractAsyncContextManager[Subscription]:
        """Open one ``subscriptions/listen`` stream (2026 era)."""
        ...


@dataclass(frozen=True)
class Stamp:
    """What every request of a negotiated session carries: 2025 era, the version header; 2026
    era, the protocol version, client info and capabilities in ``_meta`` and the routing headers
    (``Mcp-Method``, ``Mcp-Name``) — what the SDK's ``send_request`` sends."""

    version: str
    capabilities: Mapping[str, Any] = field(default_factory=dict)

    @property
    def modern(self) -> bool:
        """Whether this is a 2026-era (self-contained requests) session."""
        return self.version in MODERN_PROTOCOL_VERSIONS

    def apply(self, message: dict[str, Any]) -> dict[str, str]:
        """Stamp ``message`` (a request or notification, changed in place); its headers."""
        headers = {MCP_PROTOCOL_VERSION_HEADER: self.version}
        if not self.modern:
            return headers
        method = message["method"]
        params = message.setdefault("params", {})
        meta = params.setdefault("_meta", {})
        meta[types.PROTOCOL_VERSION_META_KEY] = self.version
        meta[types.CLIENT_INFO_META_KEY] = _CLIENT_INFO_WIRE  # shared, never changed: serialized as is
        meta[types.CLIENT_CAPABILITIES_META_KEY] = self.capabilities
        headers[MCP_METHOD_HEADER] = method
        key = NAME_BEARING_METHODS.get(method)
        if key is not None and isinstance(name := params.get(key), str):
            headers[MCP_NAME_HEADER] = encode_header_value(name)
        return headers


def client_capabilities() -> dict[str, Any]:
    """What the gateway declares to every upstream: what a direct client would — sampling with
    tools, elicitation (form and URL), roots with ``listChanged`` — so servers enable them."""
    caps = types.ClientCapabilities(
        sampling=types.SamplingCapability(tools=types.SamplingToolsCapability()),
        elicitation=types.ElicitationCapability(
            form=types.FormElicitationCapability(), url=types.UrlElicitationCapability()
        ),
        roots=types.RootsCapability(list_changed=True),
    )
    return caps.model_dump(by_alias=True, mode="json", exclude_none=True)


class Subscription:
    """One open ``subscriptions/listen`` stream: ``honored`` is the filter the server agreed to;
    iterating yields its notifications (``tools``/``resources``/``prompts`` list changes as
    their method, resource updates as ``("resources/updated", uri)``) until the server closes
    it (the loop ends) or it is lost (:class:`SubscriptionLost`)."""

    def __init__(self, subscription_id: str) -> None:
        self.subscription_id = subscription_id
        self.honored: types.SubscriptionFilter | None = None
        self.acknowledged = anyio.Event()
        self.end: str | None = None  # "graceful" | "lost" | "local"
        self.error: BaseException | None = None
        self._send, self._receive = anyio.create_memory_object_stream[tuple[str, str | None]](MAX_LISTEN_BACKLOG)

    def acknowledge(self, honored: types.SubscriptionFilter) -> None:
        """The server's acknowledgment (the first one counts)."""
        if self.honored is None:
            self.honored = honored
            self.acknowledged.set()

    def deliver(self, method: str, params: Mapping[str, Any]) -> None:
        """Queue one event (never blocks: a full backlog ends the stream as lost)."""
        if self.end is not None:
            return
        uri = params.get("uri") if method == "notifications/resources/updated" else None
        try:
            self._send.send_nowait((method, uri if isinstance(uri, str) else None))
        except anyio.WouldBlock:
            self.settle("lost", MCPError(types.INTERNAL_ERROR, "listen backlog exceeded; re-listen and re-list"))

    def settle(self, end: str, error: BaseException | None = None) -> None:
        """The stream's end (the first reason counts)."""
        if self.end is None:
            self.end, self.error = end, error
            self.acknowledged.set()
            self._send.close()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> tuple[str, str | None]:
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            if self.end == "lost":
                raise SubscriptionLost(f"listen stream {self.subscription_id} was lost") from self.error
            raise StopAsyncIteration from None


class SubscriptionLost(RuntimeError):
    """A listen stream ended without the server's graceful close."""


class PeerSession:
    """The session layer shared by every wire (see the module docstring). Subclasses implement
    :meth:`_call` (one request's exchange) and :meth:`_send` (a notification or an answer)."""

    def __init__(
        self, inbound: Inbound, tg: TaskGroup, *, source: str, on_end: Callable[[], None] | None = None
    ) -> None:
        self._inbound = inbound
        self._tg = tg
        self._source = source
        self._on_end = on_end
        self._ids = itertools.count(1)
        self._wire_stamp = Stamp(LATEST_HANDSHAKE_VERSION)
        self._listens: dict[str, Subscription] = {}
        self._running: dict[Any, anyio.CancelScope] = {}  # the server's requests being answered
        self._inbound_busy = 0
        self.ended = False
        self.protocol_version: str = ""
        self.capabilities: types.ServerCapabilities = types.ServerCapabilities()
        self.server_info: types.Implementation | None = None

    @property
    def legacy(self) -> bool:
        """Whether the negotiated era is 2025-11-25 (sessions, server→client requests)."""
        return not self._wire_stamp.modern

    # -- the wire (subclasses) -----------------------------------------------------------------

    async def _call(self, message: dict[str, Any], headers: dict[str, str], on_message: OnMessage) -> dict[str, Any]:
        """Send the request ``message`` and return its result; messages about it (its progress)
        go to ``on_message`` in the caller's task. ``ResponseError`` for an error answer."""
        raise NotImplementedError

    async def _send(self, message: dict[str, Any], headers: dict[str, str]) -> None:
        """Send a notification or an answer."""
        raise NotImplementedError

    # -- requests --------------------------------------------------------------------------------

    def new_id(self) -> int:
        """A request id unique on this connection."""
        return next(self._ids)

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        timeout_s: float | None = None,
        on_progress: ProgressFn | None = None,
        param_headers: Mapping[str, str] | None = None,
        request_id: int | str | None = None,
    ) -> dict[str, Any]:
        """Send a request and return its raw result (:class:`JsonRpcPeer`)."""
        if self.ended:
            raise UpstreamUnavailableError("the upstream connection has ended")
        rid = request_id if request_id is not None else self.new_id()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params:
            message["params"] = dict(params)
        headers = self._wire_stamp.apply(message)
        if param_headers and self._wire_stamp.modern:  # the 2026 wire's routing headers (SDK: its stamp)
            headers.update(param_headers)
        route = self._progress_route(message, on_progress)
        _requests.add({"method": method})
        try:
            with anyio.fail_after(timeout_s) if timeout_s is not None else contextlib.nullcontext():
                return await self._call(message, headers, route)
        except TimeoutError:
            raise MCPError(code=types.REQUEST_TIMEOUT, message=f"Request {method!r} timed out") from None
        except ResponseError as exc:
            error = MCPError.from_error_data(_error_data(exc.error))
            raise MessageBoundError.from_mcp_error(error) or error from None

    def _progress_route(self, message: dict[str, Any], on_progress: ProgressFn | None) -> OnMessage:
        """Give ``message`` a progress token (its id) when there is ``on_progress``; the receiver
        of its messages: that token's progress to ``on_progress``, anything else to the inbound
        notification handler (a log record on the call's stream, say)."""
        token = message["id"] if on_progress is not None else None
        if on_progress is not None:
            message.setdefault("params", {}).setdefault("_meta", {})["progressToken"] = token

        async def route(incoming: dict[str, Any]) -> None:
            params = incoming.get("params")
            if incoming.get("method") == "notifications/progress" and isinstance(params, dict):
                if on_progress is not None and params.get("progressToken") == token:
                    progress, total, text = params.get("progress"), params.get("total"), params.get("message")
                    if _number(progress):
                        await on_progress(
                            float(progress),
                            float(total) if _number(total) else None,
                            text if isinstance(text, str) else None,
                        )
                return
            await self.dispatch(incoming)

        return route

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        """Send a notification (best effort)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params:
            message["params"] = dict(params)
        try:
            await self._send(message, {MCP_PROTOCOL_VERSION_HEADER: self._wire_stamp.version})
        except (UpstreamUnavailableError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            log.debug("upstream %s: notification %s not sent (%s)", self._source, method, type(exc).__name__)

    # -- what the server starts ----------------------------------------------------------------

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Handle one message the server started (a request or a notification), wherever it
        arrived: requests are answered in a task of their own; notifications are routed
        (cancellation, listen streams) or handed to :class:`Inbound`, awaited."""
        method = message.get("method")
        if not isinstance(method, str):
            return
        if "id" in message:
            self.spawn_answer(message)
            return
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if method == "notifications/cancelled":
            target = params.get("requestId")
            scope = self._running.get(target) if isinstance(target, int | str) else None
            if scope is not None:
                scope.cancel()
            listen = self._listens.get(target) if isinstance(target, str) else None
            if listen is not None:
                listen.settle("lost")
            return
        meta = params.get("_meta")
        sub = meta.get(SUBSCRIPTION_ID_META_KEY) if isinstance(meta, dict) else None
        listen = self._listens.get(sub) if isinstance(sub, str) else None
        if listen is not None:
            if method == "notifications/subscriptions/acknowledged":
                with contextlib.suppress(ValidationError):
                    listen.acknowledge(types.SubscriptionFilter.model_validate(params.get("notifications") or {}))
                return
            listen.deliver(method, params)
        await self._inbound.notification(message)

    def spawn_answer(self, request: dict[str, Any]) -> None:
        """Answer a server→client request in a task of the session's group (bounded)."""
        if self._inbound_busy >= MAX_INBOUND:
            log.warning("upstream %s: refused a request: %d already being answered", self._source, MAX_INBOUND)
            error = {"code": types.INTERNAL_ERROR, "message": "the gateway is answering too many requests"}
            self._tg.start_soon(self._answer_with, {"jsonrpc": "2.0", "id": request["id"], "error": error})
            return
        self._inbound_busy += 1
        scope = anyio.CancelScope()
        self._running[request["id"]] = scope
        self._tg.start_soon(self._answer, request, scope)

    async def _answer(self, request: dict[str, Any], scope: anyio.CancelScope) -> None:
        try:
            with scope:
                answer = await self._inbound.serve(request)
            if not scope.cancelled_caught:
                await self._answer_with(answer)
        finally:
            self._inbound_busy -= 1
            if self._running.get(request["id"]) is scope:
                del self._running[request["id"]]

    async def _answer_with(self, answer: dict[str, Any]) -> None:
        try:
            await self._send(answer, {MCP_PROTOCOL_VERSION_HEADER: self._wire_stamp.version})
        except (UpstreamUnavailableError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            log.debug("upstream %s: an answer was not sent (%s)", self._source, type(exc).__name__)

    # -- listen streams (2026 era) -----------------------------------------------------------

    @asynccontextmanager
    async def listen(self, notifications: types.SubscriptionFilter) -> AsyncIterator[Subscription]:
        """Open one ``subscriptions/listen`` stream; entering waits for the server's
        acknowledgment (``MCPError`` if it refuses, :class:`SubscriptionLost` if the stream
        ends first); leaving ends it."""
        if self.legacy:
            raise MCPError(types.METHOD_NOT_FOUND, "subscriptions/listen needs a 2026-07-28 connection")
        sub = Subscription(f"listen-{next(_listen_ids)}")
        self._listens[sub.subscription_id] = sub
        params = {"notifications": notifications.model_dump(by_alias=True, mode="json", exclude_none=True)}
        driver = anyio.CancelScope()

        async def drive() -> None:
            with driver:
                try:
                    await self.request("subscriptions/listen", params, request_id=sub.subscription_id)
                except MCPError as exc:
                    sub.settle("lost", exc)
                    return
                except Exception as exc:
                    sub.settle("lost", exc)
                    return
                sub.acknowledge(types.SubscriptionFilter())  # a result is the graceful close
                sub.settle("graceful")

        try:
            self._tg.start_soon(drive)
            with anyio.fail_after(HANDSHAKE_TIMEOUT_S):
                await sub.acknowledged.wait()
            if sub.honored is None:
                if isinstance(sub.error, MCPError):
                    raise sub.error
                raise SubscriptionLost(f"listen stream {sub.subscription_id} ended before it was acknowledged")
            yield sub
        finally:
            sub.settle("local")
            driver.cancel()
            self._listens.pop(sub.subscription_id, None)

    # -- the handshake --------------------------------------------------------------------------

    async def _handshake_call(self, message: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        """One handshake request's exchange (HTTP overrides it: the session id is in a header)."""
        return await self._call(message, headers, self.dispatch)

    async def _handshake(self, method: str, params: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": self.new_id(), "method": method, "params": params}
        try:
            with anyio.fail_after(HANDSHAKE_TIMEOUT_S):
                return await self._handshake_call(message, headers)
        except TimeoutError:
            raise MCPError(code=types.REQUEST_TIMEOUT, message=f"Request {method!r} timed out") from None
        except ResponseError as exc:
            raise MCPError.from_error_data(_error_data(exc.error)) from None

    async def _discover(self, version: str) -> dict[str, Any]:
        meta = {
            types.PROTOCOL_VERSION_META_KEY: version,
            types.CLIENT_INFO_META_KEY: _CLIENT_INFO_WIRE,
            types.CLIENT_CAPABILITIES_META_KEY: client_capabilities(),
        }
        headers = {MCP_PROTOCOL_VERSION_HEADER: version, MCP_METHOD_HEADER: "server/discover"}
        return await self._handshake("server/discover", {"_meta": meta}, headers)

    async def _initialize(self) -> None:
        params = {
            "protocolVersion": LATEST_HANDSHAKE_VERSION,
            "capabilities": client_capabilities(),
            "clientInfo": _CLIENT_INFO_WIRE,
        }
        raw = await self._handshake("initialize", params, {MCP_PROTOCOL_VERSION_HEADER: LATEST_HANDSHAKE_VERSION})
        result = types.InitializeResult.model_validate(raw, by_name=False)
        if result.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            raise UpstreamUnavailableError(f"unsupported protocol version from the server: {result.protocol_version}")
        self._adopt(result.protocol_version, result.capabilities, result.server_info)
        await self.notify("notifications/initialized", None)
        await self._initialized()

    async def _initialized(self) -> None:
        """After a 2025-era handshake (HTTP: open the session's GET stream)."""

    async def _modern(self, raw: dict[str, Any]) -> bool:
        """Adopt a discover result if it names a modern version both sides speak."""
        try:
            result = types.DiscoverResult.model_validate(raw, by_name=False)
        except ValidationError:
            return False
        mutual = [v for v in MODERN_PROTOCOL_VERSIONS if v in result.supported_versions]
        if not mutual:
            return False
        info = (result.meta or {}).get(types.SERVER_INFO_META_KEY)
        server_info = None
        with contextlib.suppress(ValidationError):
            server_info = types.Implementation.model_validate(info) if info is not None else None
        self._adopt(mutual[-1], result.capabilities, server_info)
        return True

    def _adopt(self, version: str, capabilities: types.ServerCapabilities, info: types.Implementation | None) -> None:
        self._wire_stamp = Stamp(version, client_capabilities() if version in MODERN_PROTOCOL_VERSIONS else {})
        self.protocol_version = version
        self.capabilities = capabilities
        self.server_info = info

    async def negotiate(self, mode: str = "auto") -> None:
        """Pick the era (the SDK's ``mode`` policy): ``legacy`` initializes; ``auto`` probes
        ``server/discover`` at the newest modern version and falls back to ``initialize`` on
        anything but positive modern evidence (one re-probe when the server names a mutual
        modern version with -32022); a modern version string adopts it after one discover."""
        if mode == "legacy":
            await self._initialize()
            return
        version = mode if mode in MODERN_PROTOCOL_VERSIONS else MODERN_PROTOCOL_VERSIONS[-1]
        for attempt in range(2):
            try:
                raw = await self._discover(version)
            except MCPError as exc:
                supported = _supported(exc) if exc.code == types.UNSUPPORTED_PROTOCOL_VERSION else None
                mutual = [v for v in MODERN_PROTOCOL_VERSIONS if v in (supported or ())]
                if mutual and attempt == 0:
                    version = mutual[-1]
                    continue
                if supported is not None and not any(v in HANDSHAKE_PROTOCOL_VERSIONS for v in supported):
                    raise
                try:
                    await self._initialize()
                except MCPError as again:
                    supported = _supported(again) if again.code == types.UNSUPPORTED_PROTOCOL_VERSION else None
                    mutual = [v for v in MODERN_PROTOCOL_VERSIONS if v in (supported or ())]
                    if attempt or not mutual:
                        raise
                    version = mutual[-1]
                    continue
                return
            if not await self._modern(raw):
                await self._initialize()
            return

    # -- the end ---------------------------------------------------------------------------------

    def end(self) -> None:
        """The wire ended: listen streams are lost; ``on_end`` runs (once)."""
        if self.ended:
            return
        self.ended = True
        for sub in list(self._listens.values()):
            sub.settle("lost", UpstreamUnavailableError("the connection ended"))
        if self._on_end is not None:
            self._on_end()


class StreamSession(PeerSession):
    """A :class:`PeerSession` over a message channel (:class:`~reconciler.peer_contract.UpstreamChannel`:
    ``SessionMessage`` items both ways) — our stdio channel, the SDK's SSE transport, an
    in-process server's streams. One reader task (:meth:`run`) routes what arrives: responses
    to their waiting caller, progress to its caller's queue, the rest to :meth:`dispatch`."""

    def __init__(self, read: Any, write: Any, inbound: Inbound, tg: TaskGroup, **kw: Any) -> None:
        super().__init__(inbound, tg, **kw)
        self._read = read
        self._write = write
        self._pending: dict[Any, _Pending] = {}
        self._write_lock = anyio.Lock()

    async def run(self) -> None:
        """Read until the channel ends (then :meth:`end`); started in the session's task group."""
        try:
            while True:
                try:
                    item = await self._read.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return
                if isinstance(item, Exception):
                    log.debug("upstream %s: transport error: %s", self._source, type(item).__name__)
                    continue
                self._route(item.message)
        finally:
            for pending in self._pending.values():
                pending.settle(None)
            self._pending.clear()
            self.end()

    def _route(self, message: Any) -> None:
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            pending = self._pending.get(message.id)
            if pending is None:
                log.debug("upstream %s: dropped an answer nobody waits for (%r)", self._source, message.id)
                return
            if isinstance(message, types.JSONRPCError):
                pending.settle(ResponseError(message.error.model_dump(by_alias=True, mode="json", exclude_none=True)))
            else:
                pending.settle(message.result)
            return
        data = message.model_dump(by_alias=True, mode="json", exclude_unset=True)
        params = data.get("params")
        if data.get("method") == "notifications/progress" and isinstance(params, dict):
            pending = self._pending.get(params.get("progressToken"))
            if pending is not None:
                pending.queue(data, self._source)
            return
        if "id" in data:
            self.spawn_answer(data)
            return
        if self._inbound_busy >= MAX_INBOUND:
            log.warning("upstream %s: dropped a %s notification: handlers busy", self._source, data.get("method"))
            return
        self._inbound_busy += 1
        self._tg.start_soon(self._notified, data)

    async def _notified(self, data: dict[str, Any]) -> None:
        try:
            await self.dispatch(data)
        except Exception:
            log.exception("upstream %s: a notification handler failed", self._source)
        finally:
            self._inbound_busy -= 1

    async def _write_message(self, message: dict[str, Any]) -> None:
        typed = types.jsonrpc_message_adapter.validate_python(message, by_name=False)
        async with self._write_lock:
            await self._write.send(SessionMessage(typed))

    async def _send(self, message: dict[str, Any], headers: dict[str, str]) -> None:
        await self._write_message(message)

    async def _call(self, message: dict[str, Any], headers: dict[str, str], on_message: OnMessage) -> dict[str, Any]:
        rid = message["id"]
        if self.ended:  # the reader is gone: nothing would ever settle this request
            raise _closed()
        if len(self._pending) >= MAX_PENDING:
            raise MCPError(types.INTERNAL_ERROR, f"too many requests in flight to this upstream ({MAX_PENDING})")
        if rid in self._pending:
            raise MCPError(types.INTERNAL_ERROR, f"request id {rid!r} is already in flight")
        pending = self._pending[rid] = _Pending()
        written = False
        try:
            try:
                written = True
                await self._write_message(message)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                raise _closed() from None
            async for queued in pending.receive:
                await on_message(queued)
            outcome = pending.outcome
        except anyio.get_cancelled_exc_class():
            if written and not self.ended and message["method"] not in ("initialize", "server/discover"):
                with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_NOTICE_S):
                    reason = "cancelled by the gateway's caller"
                    await self.notify("notifications/cancelled", {"requestId": rid, "reason": reason})
            raise
        finally:
            if self._pending.get(rid) is pending:
                del self._pending[rid]
            pending.close()
        if isinstance(outcome, Exception):
            raise outcome
        if outcome is None:
            raise _closed()
        return outcome


class _Pending:
    """One request waiting for its answer: its progress queue and, once settled, the outcome
    (the result dict, the error, or ``None`` for the wire's end)."""

    def __init__(self) -> None:
        self._send, self.receive = anyio.create_memory_object_stream[dict[str, Any]](MAX_QUEUED_PROGRESS)
        self.outcome: dict[str, Any] | Exception | None = None

    def queue(self, message: dict[str, Any], source: str) -> None:
        try:
            self._send.send_nowait(message)
        except anyio.WouldBlock:
            log.debug("upstream %s: dropped a progress notification (queue full)", source)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    def settle(self, outcome: dict[str, Any] | Exception | None) -> None:
        self.outcome = outcome
        self._send.close()

    def close(self) -> None:
        self._send.close()
        self.receive.close()


def _closed() -> MCPError:
    """What a request on a stream wire that ended gets (the SDK's own "Connection closed")."""
    return MCPError(code=types.CONNECTION_CLOSED, message="Connection closed")


def _error_data(error: Mapping[str, Any]) -> types.ErrorData:
    try:
        return types.ErrorData.model_validate(error)
    except ValidationError:
        return types.ErrorData(code=types.INTERNAL_ERROR, message="malformed error from the upstream")


def _supported(exc: MCPError) -> list[str] | None:
    try:
        return types.UnsupportedProtocolVersionErrorData.model_validate(exc.error.data).supported
    except ValidationError:
        return None


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
