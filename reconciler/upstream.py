"""Upstream connections and the reader that lists sources through them.

An :class:`UpstreamConnection` is one live session to a source — the gateway's own JSON-RPC
session (``reconciler/jsonrpc_peer.py``, ADR 0037) over the source's transport — held open by a
task in its owner's task group (structured concurrency: the owner awaits it). It turns the upstream's
``list_changed`` notifications — pushed (2025-11-25) or over ``subscriptions/listen``
(2026-07-28) — and its death into dirty marks for its source, but only while it is the current
connection for that source; notifications from superseded connections are ignored. Whoever
holds resource subscriptions on a connection registers for its pushed
``notifications/resources/updated`` (:meth:`UpstreamConnection.on_resource_updated`).

Every connection declares the client capabilities a direct client would — sampling (with tools),
elicitation (form and URL) and roots (with ``listChanged``;
``jsonrpc_peer.client_capabilities``) — so servers enable those features, and hands what its
server starts (those requests, log records, elicitation-complete notices) to
the engine's :class:`~reconciler.peer.PeerSwitch`, where the front door answers them
(``api/frontdoor/relay.py``) — except ``roots/list`` for a source with ``roots`` configured,
which the connection answers itself with those. The upstream's log level is the peer's to set.

:class:`UpstreamReader` implements the engine's ``SourceReader``: it reuses a healthy
connection whose spec and watched inputs are unchanged and opens a new one otherwise."""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from types import TracebackType
from typing import Any, TypeVar, overload

import anyio
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp import MCPError
from pydantic import BaseModel, TypeAdapter, ValidationError

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.errors import ReconnectThrottledError, SourceReadError, UpstreamUnavailableError
from mcp_reconciler.reconciler.failure_cause import ConnectTimeoutError, Evidence, startup_allowance
from mcp_reconciler.reconciler.http_peer import HttpPeer
from mcp_reconciler.reconciler.jsonrpc_peer import PeerSession, ProgressFn, Subscription, SubscriptionLost
from mcp_reconciler.reconciler.listing import capability_kinds, list_source
from mcp_reconciler.reconciler.logsource import current_source
from mcp_reconciler.reconciler.model import SourceSpec, SourceState
from mcp_reconciler.reconciler.peer import PeerSwitch
from mcp_reconciler.reconciler.peer_contract import MessageBoundError, bound_unit
from mcp_reconciler.reconciler.result_check import check_result
from mcp_reconciler.reconciler.task_support import honest_listing, runs_tool_tasks
from mcp_reconciler.reconciler.tasks import background_tasks
from mcp_reconciler.reconciler.throttle import Backoff
from mcp_reconciler.reconciler.transports import Target, in_process, transport_for

log = logging.getLogger("mcp_reconciler.upstream")

R = TypeVar("R", bound=BaseModel)

#: Builds what a connection opens for a spec: a :class:`~reconciler.transports.Target` (default:
#: stdio, HTTP or SSE from ``spec.transport``) or, in tests and embeddings, an in-process
#: low-level ``Server``. The second argument is the callback to invoke when the transport's
#: stream ends (death detection).
TargetFactory = Callable[[SourceSpec, Callable[[], None]], Any]


def default_targets(spec: SourceSpec, on_end: Callable[[], None]) -> Target:
    """The default :data:`TargetFactory`: the stdio, HTTP or SSE transport ``spec.transport`` names."""
    return transport_for(spec, on_end)


_ids = itertools.count(1)

#: Re-listening after a listen stream ended on a live connection: exponential backoff between
#: these bounds, reset once a stream stayed open for LISTEN_STABLE_S.
LISTEN_RETRY_MIN_S = 0.5
LISTEN_RETRY_MAX_S = 30.0
LISTEN_STABLE_S = 30.0


_NOTIFICATION: TypeAdapter[Any] = TypeAdapter(types.ServerNotification)
_REQUEST: TypeAdapter[Any] = TypeAdapter(types.ServerRequest)
_REQUEST_METHODS = frozenset({"ping", "sampling/createMessage", "elicitation/create", "roots/list"})


class _Probe(BaseModel):
    model_config = {"extra": "allow"}


def _mismatch(kind: str) -> types.ErrorData:
    """The peer answered a request with another request's result (a bug, never the server's)."""
    return types.ErrorData(code=types.INTERNAL_ERROR, message=f"the gateway could not answer the {kind} request")


class UpstreamConnection:
    """One client session to one source. Closed exactly once via :meth:`aclose`."""

    def __init__(
        self,
        spec: SourceSpec,
        targets: TargetFactory,
        *,
        mode: str = "auto",
        on_event: Callable[[UpstreamConnection, str], None] | None = None,
        connect_timeout_s: float = 10.0,
        health_interval_s: float | None = None,
        peer: PeerSwitch | None = None,
        connect_setting: str = "timeouts.connect_s",
    ) -> None:
        self.spec = spec
        self._connect_setting = connect_setting
        self._peer = peer or PeerSwitch()  # unattached: requests refused, logs dropped
        self.source = spec.name
        self._id = f"{spec.name}#{next(_ids)}"
        self._target = targets(spec, self._transport_ended)
        self._health_interval_s = health_interval_s
        self.connected_at: float | None = None
        self._mode = mode
        self._on_event = on_event
        self._connect_timeout_s = connect_timeout_s
        self._session: PeerSession | None = None
        self._stop = anyio.Event()
        self._done = anyio.Event()
        self._closing = False
        self.dead = False
        self._death_reported = False
        self.protocol_version: str | None = None
        self.capabilities: types.ServerCapabilities | None = None
        self.listens = 0  # listen streams the upstream acknowledged on this connection (2026 era)
        self._update_listeners: dict[object, Callable[[UpstreamConnection, str], None]] = {}

    @property
    def connection_id(self) -> str:
        """``"<source>#<n>"``: unique within the process, stable for the connection's life."""
        return self._id

    @property
    def evidence(self) -> Evidence | None:
        """What the transport saw of the upstream (HTTP status, exit code, last stderr lines),
        for the cause of a failure (``reconciler/failure_cause.py``); None for in-process targets."""
        evidence = getattr(self._target, "evidence", None)
        return evidence if isinstance(evidence, Evidence) else None

    @property
    def alive(self) -> bool:
        """True while the session is open and neither dead nor closing; once dead or closing, never again."""
        return self._session is not None and not self.dead and not self._closing

    @property
    def session(self) -> PeerSession:
        """The open session; UpstreamUnavailableError if the connection is not :attr:`alive`."""
        if self._session is None or self.dead or self._closing:
            raise UpstreamUnavailableError(f"connection {self._id} is not open")
        return self._session

    def _open(self) -> AbstractAsyncContextManager[PeerSession]:
        if isinstance(self._target, Target):
            return self._target.open(self)
        return in_process(self._target, self.source, self._transport_ended).open(self)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect, report started, then hold the session until :meth:`aclose` or death.

        Connection failures before ``started`` propagate to the starter; failures afterwards are
        recorded as death (never raised into the owner's task group)."""
        started = False
        # Every task the transport and session start from here inherits the source: what they
        # log (the channel's reader on malformed output, say) is labeled and rate-limited per source.
        current_source.set(self.source)
        try:
            # The connect deadline scope must enclose the whole session (a scope may not exit
            # before the contexts entered inside it), so it is lifted once connected.
            with anyio.CancelScope(deadline=anyio.current_time() + self._connect_timeout_s) as connect_scope:
                async with self._open() as session:
                    with telemetry.tracer.start_as_current_span(
                        "upstream.handshake", attributes={"source": self.source}
                    ):
                        await session.negotiate(self._mode)
                    connect_scope.deadline = math.inf
                    self._session = session
                    self.protocol_version = session.protocol_version
                    self.capabilities = session.capabilities
                    async with anyio.create_task_group() as tg:
                        if not session.legacy:
                            # Listening before the connection is reported started: a change made
                            # after the first listing cannot fall between that listing and the
                            # stream's acknowledgment (there is no replay).
                            await tg.start(self._listen, session)
                        started = True
                        self.connected_at = anyio.current_time()
                        task_status.started()
                        if self._health_interval_s:
                            tg.start_soon(self._health_loop, self._health_interval_s)
                        await self._stop.wait()
                        tg.cancel_scope.cancel()
            if connect_scope.cancelled_caught and not started:
                raise ConnectTimeoutError(self._connect_timeout_s, self._connect_setting)
        except Exception as exc:
            if not started:
                raise
            log.info("upstream connection %s ended: %s", self._id, type(exc).__name__)
        finally:
            self._session = None
            was_closing = self._closing
            self.dead = True
            self._done.set()
            if started and not was_closing:
                self._emit("dead")

    async def aclose(self) -> None:
        """Idempotent: stop the session and wait for its task to finish."""
        self._closing = True
        self._stop.set()
        await self._done.wait()

    @property
    def legacy(self) -> bool:
        """Whether this connection speaks the 2025-11-25 era (sessions, server→client requests)
        rather than 2026-07-28 (``InputRequiredResult`` instead of server→client requests)."""
        return (self.protocol_version or "").startswith("2025")

    @property
    def http_peer(self) -> HttpPeer | None:
        """The peer every request goes through when the source speaks streamable HTTP
        (``reconciler/http_peer.py``), else ``None`` (stdio, SSE, in-process: the session over a
        message channel)."""
        return self._target.peer if isinstance(self._target, Target) else None

    async def serve(self, request: dict[str, Any]) -> dict[str, Any]:
        """``Inbound.serve``: :meth:`serve_request`, as the wire's dict."""
        answer = await self.serve_request(request)
        return answer.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def serve_request(self, message: dict[str, Any]) -> types.JSONRPCResponse | types.JSONRPCError:
        """Answer a server→client request, wherever it arrived: ``ping`` at once, sampling,
        elicitation and roots through the peer switch (:meth:`_on_sampling` and its siblings;
        configured roots answer ``roots/list`` here). A request the gateway does not know is
        ``METHOD_NOT_FOUND``, a known one with bad params ``INVALID_PARAMS``."""
        request_id = message["id"]
        try:
            request = _REQUEST.validate_python(
                {"method": message.get("method"), "params": message.get("params")}, by_name=False
            )
        except ValidationError:
            known = message.get("method") in _REQUEST_METHODS
            error = (
                types.ErrorData(code=types.INVALID_PARAMS, message="Invalid params")
                if known
                else types.ErrorData(code=types.METHOD_NOT_FOUND, message="Method not found")
            )
            return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
        answer: Any
        try:
            if isinstance(request, types.PingRequest):
                answer = types.EmptyResult()
            elif isinstance(request, types.CreateMessageRequest):
                answer = await self._on_sampling(request, request_id)
            elif isinstance(request, types.ElicitRequest):
                answer = await self._on_elicitation(request, request_id)
            elif isinstance(request, types.ListRootsRequest):
                answer = await self._on_list_roots(request, request_id)
            else:
                answer = types.ErrorData(code=types.METHOD_NOT_FOUND, message="Method not found")
        except MCPError as exc:
            answer = exc.error
        except UpstreamUnavailableError:
            answer = types.ErrorData(code=types.INTERNAL_ERROR, message="the gateway is closing this connection")
        if isinstance(answer, types.ErrorData):
            return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=answer)
        result = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
        return types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result)

    @overload
    async def send(
        self,
        request: Any,
        result_type: type[R],
        timeout_s: float | None = None,
        progress_callback: ProgressFn | None = None,
        param_headers: Mapping[str, str] | None = None,
    ) -> R: ...

    @overload
    async def send(
        self,
        request: Any,
        result_type: TypeAdapter[Any],
        timeout_s: float | None = None,
        progress_callback: ProgressFn | None = None,
        param_headers: Mapping[str, str] | None = None,
    ) -> Any: ...

    async def send(
        self,
        request: Any,
        result_type: Any,
        timeout_s: float | None = None,
        progress_callback: ProgressFn | None = None,
        param_headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Send a request on this connection and type its result as ``send_request`` would (no
        client-side caching or output-schema validation: a gateway passes results through).
        ``result_type`` is a pydantic model or ``TypeAdapter``. :meth:`send_raw`, then
        :meth:`check`."""
        raw = await self.send_raw(
            request, timeout_s=timeout_s, progress_callback=progress_callback, param_headers=param_headers
        )
        return self.check(request.method, raw, result_type)

    def check(self, method: str, raw: dict[str, Any], result_type: Any) -> Any:
        """``raw``, a result of ``method`` on this connection, typed as ``send_request`` types it
        (``pydantic.ValidationError`` for one that does not conform to the negotiated version)."""
        return check_result(self.protocol_version or "2025-11-25", method, raw, result_type)

    def send_raw(
        self,
        request: Any,
        *,
        timeout_s: float | None = None,
        progress_callback: ProgressFn | None = None,
        param_headers: Mapping[str, str] | None = None,
    ) -> Awaitable[dict[str, Any]]:
        """Send ``request`` (an ``mcp_types`` request model); awaiting the returned awaitable
        gives its raw result. The one path of every request to an upstream (ADR 0030, ADR 0037):
        the connection's session (``reconciler/jsonrpc_peer.py``) over its wire — a
        streamable-HTTP source's :attr:`http_peer`, our stdio channel (ADR 0025), the SDK's SSE
        transport. Stamped as the SDK's ``send_request`` stamps it; ``timeout_s`` raises
        ``MCPError`` ``REQUEST_TIMEOUT``; an error answer raises ``MCPError``, a bound
        :class:`MessageBoundError`, a broken exchange :class:`UpstreamUnavailableError`.
        Cancelling the caller cancels upstream. ``param_headers``: a ``tools/call``'s
        ``Mcp-Param-*`` headers (``CatalogEntry.call_headers``), sent to a 2026-era upstream.

        A hand-off, not a layer (issue 26's call path): the connection resolves its open
        session (``UpstreamUnavailableError`` at once when it is not :attr:`alive`) and returns
        the session's request for the caller to await, so the call goes from the operation to
        the session directly. Nothing is left to do here afterwards: a wire that ends calls
        the session's ``on_end`` (this connection's :meth:`_transport_ended`) itself."""
        data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
        return self.session.request(
            data["method"],
            data.get("params"),
            timeout_s=timeout_s,
            on_progress=progress_callback,
            param_headers=param_headers,
        )

    async def notify(self, notification: types.ClientNotification) -> None:
        """Send a notification to the server (e.g. progress on a request it sent us)."""
        data = notification.model_dump(by_alias=True, mode="json", exclude_none=True)
        await self.session.notify(data["method"], data.get("params"))

    def listen(
        self,
        *,
        tools_list_changed: bool = False,
        resources_list_changed: bool = False,
        prompts_list_changed: bool = False,
        resource_subscriptions: list[str] | None = None,
    ) -> AbstractAsyncContextManager[Subscription]:
        """Open one ``subscriptions/listen`` stream on this connection (2026 era; see
        :meth:`~reconciler.jsonrpc_peer.PeerSession.listen`)."""
        notifications = types.SubscriptionFilter(
            tools_list_changed=tools_list_changed or None,
            resources_list_changed=resources_list_changed or None,
            prompts_list_changed=prompts_list_changed or None,
            resource_subscriptions=resource_subscriptions or None,
        )
        return self.session.listen(notifications)

    def on_resource_updated(self, listener: Callable[[UpstreamConnection, str], None]) -> Callable[[], None]:
        """Call ``listener(self, uri)`` for every ``notifications/resources/updated`` the server
        sends (2026-era copies of listen-stream events included: the session tees them here too);
        returns an idempotent remover. Listeners must not block or raise."""
        token = object()
        self._update_listeners[token] = listener
        return lambda: self._update_listeners.pop(token, None) and None

    def _transport_ended(self) -> None:
        """The transport's read stream ended: the upstream process exited or the stream dropped."""
        if not self._closing and not self.dead:
            self.dead = True
            log.info("upstream connection %s: transport ended", self._id)
            self._emit("dead")
            self._stop.set()

    async def _health_loop(self, interval_s: float) -> None:
        """Idle HTTP upstreams can die unnoticed; probe them (see :meth:`_probe`)."""
        while True:
            await anyio.sleep(interval_s)
            if not await self._probe(max(1.0, interval_s)):
                if self._closing:
                    return
                log.info("upstream connection %s failed its health check", self._id)
                self._die()
                return

    # -- server-initiated traffic, handed to the peer switch ------------------------------------

    async def _on_sampling(
        self, request: types.CreateMessageRequest, request_id: types.RequestId
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        answer = await self._peer.on_request(self, request, request_id)
        if isinstance(answer, types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData):
            return answer
        return _mismatch("sampling")

    async def _on_elicitation(
        self, request: types.ElicitRequest, request_id: types.RequestId
    ) -> types.ElicitResult | types.ErrorData:
        answer = await self._peer.on_request(self, request, request_id)
        if isinstance(answer, types.ElicitResult | types.ErrorData):
            return answer
        return _mismatch("elicitation")

    async def _on_list_roots(
        self, request: types.ListRootsRequest, request_id: types.RequestId
    ) -> types.ListRootsResult | types.ErrorData:
        configured = self.spec.transport.get("roots")
        if configured is not None:  # the operator's roots for this source answer every roots/list
            return types.ListRootsResult(roots=[types.Root.model_validate(dict(r)) for r in configured])
        answer = await self._peer.on_request(self, request, request_id)
        if isinstance(answer, types.ListRootsResult | types.ErrorData):
            return answer
        return _mismatch("roots")

    async def notification(self, message: dict[str, Any]) -> None:
        """``Inbound.notification``: :meth:`deliver`."""
        await self.deliver(message)

    async def deliver(self, message: dict[str, Any]) -> None:
        """Handle a notification the server sent, wherever it arrived: typed (``mcp_types``), then
        :meth:`_on_message`. One that is not a valid server notification is logged at DEBUG and
        dropped, as the SDK drops a malformed message."""
        try:
            typed = _NOTIFICATION.validate_python(message, by_name=False)
        except ValidationError:
            log.debug("upstream %s: dropped a malformed notification", self._id)
            return
        await self._on_message(typed)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.LoggingMessageNotification):
            await self._peer.on_log(self, message.params)
        elif isinstance(message, types.ElicitCompleteNotification):
            await self._peer.on_notification(self, message)
        elif isinstance(message, types.ToolListChangedNotification):
            self._emit("tools")
        elif isinstance(message, types.ResourceListChangedNotification):
            self._emit("resources")
        elif isinstance(message, types.PromptListChangedNotification):
            self._emit("prompts")
        elif isinstance(message, types.ResourceUpdatedNotification):
            for listener in list(self._update_listeners.values()):
                listener(self, str(message.params.uri))

    async def _listen(self, session: PeerSession, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """New-era change events (copies also reach the message handler; dirty marks are
        idempotent, so seeing one twice costs nothing).

        A listen stream that ends on a live connection (the upstream SDK ends a stream whose
        backlog filled up, e.g. under a ``list_changed`` flood) is not death: events may have
        been lost and there is no replay, so the source is marked dirty (re-listed) and the
        stream is opened again, with backoff. Whether the connection itself is alive is asked
        right away (one probe); only a failed probe, or the transport's own end, is death --
        never the listen stream alone, which would kill a healthy upstream with calls in flight."""
        delay = LISTEN_RETRY_MIN_S
        ever_acknowledged = False
        reported = False

        def report() -> None:  # started: once the first stream is acknowledged, or listening failed
            nonlocal reported
            if not reported:
                reported = True
                task_status.started()

        while True:
            acknowledged = False
            opened_at = anyio.current_time()
            try:
                notifications = types.SubscriptionFilter(
                    tools_list_changed=True, resources_list_changed=True, prompts_list_changed=True
                )
                async with session.listen(notifications) as sub:
                    acknowledged = ever_acknowledged = True
                    self.listens += 1
                    report()
                    async for _event in sub:
                        self._emit("listen")
            except SubscriptionLost:
                pass
            except Exception as exc:
                if not ever_acknowledged:  # the server does not offer listen: rely on health checks and polls
                    log.info("upstream %s: listen unavailable (%s)", self._id, type(exc).__name__)
                    report()
                    return
            report()
            if self._closing or self.dead:
                return
            if not await self._probe():
                log.info("upstream connection %s: listen stream ended and the connection is gone", self._id)
                self._die()
                return
            if acknowledged and anyio.current_time() - opened_at >= LISTEN_STABLE_S:
                delay = LISTEN_RETRY_MIN_S  # it had been fine for a while: start the backoff over
            self._emit("listen")  # events may have been lost: re-list
            log.info("upstream %s: listen stream ended; listening again in %.1f s", self._id, delay)
            await anyio.sleep(delay)
            delay = min(delay * 2, LISTEN_RETRY_MAX_S)

    async def _probe(self, timeout_s: float = 10.0) -> bool:
        """One liveness probe: ping in the legacy era, an uncached first-page tools/list in the
        new one (it has no ping)."""
        try:
            with anyio.fail_after(timeout_s):
                if (self.protocol_version or "").startswith("2025"):
                    await self.send(types.PingRequest(), types.EmptyResult)
                else:
                    await self.send(types.ListToolsRequest(params=None), _Probe)
        except MessageBoundError:
            return True  # it answered (a page over a list bound is the listing's problem, not death)
        except Exception:
            return False
        return True

    def _die(self) -> None:
        self.dead = True
        self._emit("dead")
        self._stop.set()

    def _emit(self, what: str) -> None:
        if what == "dead":
            if self._death_reported:
                return
            self._death_reported = True
        if self._on_event is not None and not self._closing:
            self._on_event(self, what)


class UpstreamReader:
    """The engine's ``SourceReader`` over MCP client sessions.

    ``async with UpstreamReader(targets, on_dirty=queue.add):`` owns every connection task and
    retry timer; leaving the block closes any connection still open (the runtime normally closed
    them already — closing is idempotent) and stops the timers.

    ``on_dirty`` is the trigger sink, fixed at construction (the engine hands it the trigger
    queue's ``add``): it receives a source name and a reason (``list_changed`` or ``reconnect``)
    whenever that source should be re-listed — a ``list_changed`` from its current connection,
    that connection's death, or a throttled reconnect becoming allowed. It must not block.
    Without a sink the reader still lists, but reports nothing. ``peer`` is the switch every
    connection hands its server-initiated traffic to (without one, each connection refuses
    requests and drops logs).

    Reconnects are throttled per source (I8, :class:`~reconciler.throttle.Backoff`): a read that
    needs a new connection before its source's next allowed attempt fails fast with "reconnect
    throttled" (the source keeps its last-known-good state) and a timer marks the source dirty
    when the attempt becomes allowed, so recovery needs no outside trigger."""

    def __init__(
        self,
        target_factory: TargetFactory = default_targets,
        *,
        bounds: Bounds | None = None,
        on_dirty: Callable[[str, str], None] | None = None,
        mode: str = "auto",
        backoff: Backoff | None = None,
        health_interval_s: float | None = 30.0,
        connect_timeout_s: float = 10.0,
        peer: PeerSwitch | None = None,
    ) -> None:
        self._peer = peer
        self.bounds = bounds or Bounds()
        self._targets = target_factory
        if target_factory is default_targets:
            # The default transports read under this reader's bounds (ADR 0025): every message,
            # and list pages under the listing's byte bound.
            bounds = self.bounds

            def bounded_targets(spec: SourceSpec, on_end: Callable[[], None]) -> Any:
                return transport_for(
                    spec,
                    on_end,
                    message_bytes=bounds.upstream_message_bytes,
                    list_bytes=bounds.bytes_per_candidate,
                    list_entries=bounds.entries_per_generation,
                )

            self._targets = bounded_targets
        self._on_dirty = on_dirty
        self._mode = mode
        self.backoff = backoff or Backoff(
            base_s=self.bounds.reconnect_backoff_min_s,
            cap_s=self.bounds.reconnect_backoff_max_s,
            cooldown_s=self.bounds.cooldown_s,
        )
        self._health_interval_s = health_interval_s
        self._connect_timeout_s = connect_timeout_s
        self._current: dict[str, UpstreamConnection] = {}
        self._open: set[UpstreamConnection] = set()
        self._timers: set[str] = set()
        self._started: set[str] = set()  # spec digests that connected once: no startup allowance
        self._tg: TaskGroup | None = None
        self._exit = AsyncExitStack()
        self.opened = 0

    async def __aenter__(self) -> UpstreamReader:
        async with AsyncExitStack() as stack:
            self._tg = await stack.enter_async_context(background_tasks())
            stack.push_async_callback(self._close_open)  # runs first on exit, before the tasks are cancelled
            self._exit = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._exit.__aexit__(exc_type, exc, tb)

    async def _close_open(self) -> None:
        with anyio.CancelScope(shield=True):
            for conn in list(self._open):
                await conn.aclose()

    @property
    def on_dirty(self) -> Callable[[str, str], None] | None:
        """The trigger sink given at construction (read-only: wiring flows one way)."""
        return self._on_dirty

    def current(self, source: str) -> UpstreamConnection | None:
        """The connection last listed for ``source`` (its notifications are the ones that count), or None."""
        return self._current.get(source)

    def open_connections(self) -> int:
        """Connections whose task is running in this reader's task group (opened and not yet ended)."""
        return len(self._open)

    def next_attempt_at(self, source: str) -> float | None:
        """Wall-clock time of the next allowed reconnect, if one is being throttled."""
        wait = self.backoff.wait_s(source)
        return time.time() + wait if wait > 0 else None

    async def read(self, spec: SourceSpec, previous: SourceState | None, *, inputs_digest: str) -> SourceState:
        """List ``spec`` (``SourceReader.read``): reuse ``previous``'s connection while it is alive and its
        spec and inputs digests match, otherwise open one (throttled, I8). A failed listing closes a
        connection it opened, schedules a retry, and raises SourceReadError, UpstreamUnavailableError or
        ReconnectThrottledError; tools needing tasks the connection cannot run are left out."""
        conn: UpstreamConnection | None = None
        prev_conn = previous.connection if previous is not None else None
        if (
            isinstance(prev_conn, UpstreamConnection)
            and prev_conn.alive
            and previous is not None
            and previous.spec_digest == spec.digest
            and previous.inputs_digest == inputs_digest
        ):
            conn = prev_conn
        opened = conn is None
        if conn is None:
            conn = await self.open(spec)
        try:
            with telemetry.tracer.start_as_current_span("upstream.list", attributes={"source": spec.name}):
                listing = await list_source(
                    conn.send, spec, self.bounds, kinds=capability_kinds(conn.capabilities), previous=previous
                )
        except BaseException as exc:
            if isinstance(exc, Exception):
                # Retry on our own, with backoff: the cycle still publishes (LKG kept), so the
                # queue will not retry this source for us (I8: recovery needs no outside trigger).
                self._retry_later(spec.name, self.backoff.failure(spec.name))
            if opened:
                with anyio.CancelScope(shield=True):
                    await conn.aclose()
            if isinstance(exc, SourceReadError):
                exc.evidence = exc.evidence or conn.evidence
                raise
            if isinstance(exc, MessageBoundError):
                unit = bound_unit(exc.bound)
                bounded_error = SourceReadError(
                    f"listing refused while reading: a page passed {exc.bound} ({exc.limit} {unit})",
                    detail=f"source {spec.name}: a list page was refused at {exc.size} {unit}",
                    cause_kind="bound_exceeded",
                )
                bounded_error.evidence = conn.evidence
                raise bounded_error from exc
            error: SourceReadError
            if isinstance(exc, MCPError):
                error = SourceReadError("upstream rejected the listing", detail=f"{exc.error.code}: {exc}")
            elif isinstance(exc, Exception):
                error = UpstreamUnavailableError(f"{type(exc).__name__}: {exc}")
            else:
                raise
            error.evidence = conn.evidence
            raise error from exc
        self._current[spec.name] = conn
        # Never advertise what cannot be served: tools that need tasks this connection cannot run.
        entries, task_diagnostics = honest_listing(
            listing.entries, spec, self.bounds, runs_tasks=runs_tool_tasks(conn.protocol_version, conn.capabilities)
        )
        return SourceState(
            source=spec.name,
            spec_digest=spec.digest,
            entries=entries,
            built_at=time.time(),
            connection=conn,
            diagnostics=listing.diagnostics + task_diagnostics,
            inputs_digest=inputs_digest,
        )

    async def open(self, spec: SourceSpec) -> UpstreamConnection:
        """Open and start a new connection for ``spec`` (owned by this reader's task group),
        subject to the source's reconnect throttle (I8)."""
        assert self._tg is not None, "UpstreamReader must be entered (async with) before reading"
        wait = self.backoff.wait_s(spec.name)
        if wait > 0:
            self._retry_later(spec.name, wait)
            raise ReconnectThrottledError(
                wait, detail=f"source {spec.name}: {self.backoff.failures(spec.name)} consecutive failures"
            )
        self.backoff.attempt(spec.name)
        timeout_s, setting = self._connect_deadline(spec)
        conn = UpstreamConnection(
            spec,
            self._targets,
            mode=self._mode,
            on_event=self._on_event,
            connect_timeout_s=timeout_s,
            connect_setting=setting,
            health_interval_s=self._health_interval_s if spec.transport.get("kind") in ("http", "sse") else None,
            peer=self._peer,
        )
        telemetry.reconnects.add(1, {"source": spec.name})
        self.opened += 1
        try:
            await self._tg.start(self._run_conn, conn)
        except Exception as exc:
            delay = self.backoff.failure(spec.name)
            self._retry_later(spec.name, delay)
            error = UpstreamUnavailableError(f"connect failed: {type(exc).__name__}: {exc}")
            error.evidence = conn.evidence
            raise error from exc
        self._started.add(spec.digest)
        return conn

    def _connect_deadline(self, spec: SourceSpec) -> tuple[float, str]:
        """(seconds, the setting that says so) for a new connection to ``spec``: its
        ``timeouts.connect_s`` (the reader's default without one), or on the spec's first start
        in this process the startup allowance (``failure_cause.startup_allowance``) if larger:
        a cold ``npx -y`` downloads its package before it speaks."""
        configured = (spec.transport.get("timeouts") or {}).get("connect_s")
        timeout_s = float(configured) if configured is not None else self._connect_timeout_s
        if spec.digest not in self._started:
            allowance = startup_allowance(spec.transport)
            if allowance is not None and allowance > timeout_s:
                return allowance, "timeouts.startup_s"
        return timeout_s, "timeouts.connect_s"

    async def _run_conn(self, conn: UpstreamConnection, *, task_status: TaskStatus[None]) -> None:
        self._open.add(conn)
        try:
            await conn.run(task_status=task_status)
        finally:
            self._open.discard(conn)

    def _retry_later(self, source: str, delay_s: float) -> None:
        """One timer per source: mark it dirty when its next attempt is allowed."""
        if source in self._timers or self._tg is None:
            return
        self._timers.add(source)

        async def timer() -> None:
            try:
                await anyio.sleep(delay_s)
            finally:
                self._timers.discard(source)
            if self._on_dirty is not None:
                self._on_dirty(source, "reconnect")

        self._tg.start_soon(timer)

    def _on_event(self, conn: UpstreamConnection, what: str) -> None:
        if self._current.get(conn.source) is not conn:
            return  # a superseded connection: its news is not about the current catalog
        if what == "dead" and conn.connected_at is not None:
            self.backoff.ended(conn.source, anyio.current_time() - conn.connected_at)
        if self._on_dirty is not None:
            # The reason is provenance for the published revision (events.TriggerReason).
            self._on_dirty(conn.source, "reconnect" if what == "dead" else "list_changed")
