"""The relay: what an upstream server starts while serving a call reaches the client that made
the call, and only that client (I17; ADR 0015).

**Calls.** Every forwarded operation registers a :class:`Call` for its upstream connection and
sets :data:`CURRENT_CALL` in the task that sends the upstream request (:meth:`Relay.call`).

**Attribution.** A server→client request or log record arriving on a connection belongs to:

1. the call whose own response stream carried it — the streamable-HTTP client delivers such a
   message in a copy of the sending task's context (the upstream peer), so
   :data:`CURRENT_CALL` names the call exactly, however many calls are in flight;
2. otherwise (stdio, SSE, an HTTP server's standalone stream) the *only* call in flight on that
   connection, if there is exactly one — the wire does not say which call a message is about,
   and the single caller is the only session that can have caused it;
3. otherwise nothing: with no call in flight it is not tied to a call (roots: configured roots or
   a refusal; sampling/elicitation: a refusal; logs: every session with the source granted),
   and with several calls in flight it is *ambiguous* — refused (requests) or dropped (logs),
   never delivered to a session that might not have caused it.

**Delivery** depends on the downstream's era. A 2025-11-25 client gets a server→client request
on the call's own request stream (``link.ask_client``, ADR 0023), after a capability check: a client
that did not declare the capability costs the upstream a clear JSON-RPC error (-32600, data
``capability_missing``). A 2026-07-28 client cannot receive requests: its call is served through
an :class:`~api.frontdoor.exchanges.Exchanges` exchange, which answers it with an
``InputRequiredResult`` and completes the held upstream request when the client retries.

**2026-era upstreams** ask with an ``InputRequiredResult`` instead: for a 2026 client it passes
through with its ``request_state`` sealed to the session (:class:`~api.frontdoor.exchanges.StateSeal`);
for a legacy client the gateway fulfils each input request through server→client requests and
retries upstream (:meth:`Relay.fulfil`), at most :data:`MAX_INPUT_ROUNDS` rounds.

**Cancellation, both ways.** The upstream cancelling its request cancels the SDK callback task,
which cancels the downstream request (the SDK sends ``notifications/cancelled``). The downstream
call ending — result, error or cancellation — cancels every request still relayed for it.
Progress the downstream reports on a relayed request goes back up under the upstream's token."""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar, Token
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.shared.dispatcher import CallOptions

from mcp_reconciler.api.frontdoor import link
from mcp_reconciler.api.frontdoor.capabilities import missing_capability, missing_from
from mcp_reconciler.api.frontdoor.observe import relayed
from mcp_reconciler.api.frontdoor.sessions import Binding
from mcp_reconciler.reconciler.peer import PeerAnswer, no_roots, request_kind
from mcp_reconciler.reconciler.upstream import UpstreamConnection

log = logging.getLogger("mcp_reconciler.frontdoor")
_request_ids = itertools.count(1)

ELICITATIONS_REMEMBERED = 1024  # URL elicitations whose completion notice can still be routed

#: The call this task is forwarding, if any (set by :meth:`Relay.call`; see the module docstring).
CURRENT_CALL: ContextVar[Call | None] = ContextVar("mcp_reconciler_call", default=None)

#: Codes the downstream client sees for relay failures (the upstream's own errors keep theirs).
CAPABILITY_MISSING = -32030
INVALID_REQUEST_STATE = -32031
INPUT_ROUNDS_EXCEEDED = -32032


class RelayError(MCPError):
    """A relay failure the downstream client may see as is: the gateway's own words, or the
    downstream client's own answer — never upstream text (I12)."""


Ambiguous = Literal["ambiguous"]
AMBIGUOUS: Ambiguous = "ambiguous"


class Call:
    """One forwarded operation in flight on one upstream connection (and the context manager
    that registers it: see :meth:`Relay.call`).

    ``ctx`` is the downstream request being served (``None`` while a 2026-era exchange is parked
    between rounds); ``exchange`` is set when the call runs as one (a 2026 client on a legacy
    upstream). ``scopes`` holds the cancel scopes of requests relayed for this call, cancelled
    when it ends. ``deliveries``/``settled`` let the forwarder wait for log records that are
    still being relayed before it answers (they must precede the result). Slotted, with the
    lock and scope set made on first use: every forwarded operation builds one."""

    __slots__ = (
        "_calls",
        "_lock",
        "_scopes",
        "_token",
        "binding",
        "connection_id",
        "ctx",
        "deliveries",
        "exchange",
        "open",
        "settled",
    )

    def __init__(
        self, binding: Binding, ctx: ServerRequestContext[Any] | None, connection_id: str, exchange: Any = None
    ) -> None:
        self.binding = binding
        self.ctx = ctx
        self.connection_id = connection_id
        self.exchange = exchange
        self.open = True
        self.deliveries = 0
        self.settled: anyio.Event | None = None
        self._lock: anyio.Lock | None = None
        self._scopes: set[anyio.CancelScope] | None = None
        self._calls: dict[str, set[Call]] | None = None
        self._token: Token[Call | None] | None = None

    @property
    def lock(self) -> anyio.Lock:
        """Serializes relays to this call's client (log records go out in arrival order)."""
        if self._lock is None:
            self._lock = anyio.Lock()
        return self._lock

    @property
    def scopes(self) -> set[anyio.CancelScope]:
        """The cancel scopes of this call's relayed requests still waiting on the client (created lazily)."""
        if self._scopes is None:
            self._scopes = set()
        return self._scopes

    def begin_delivery(self) -> None:
        """Count one relay to the downstream that must finish before the result."""
        self.deliveries += 1

    def end_delivery(self) -> None:
        """One relay begun with :meth:`begin_delivery` finished; the last one wakes :meth:`settle`."""
        self.deliveries -= 1
        if self.deliveries == 0 and self.settled is not None:
            self.settled.set()

    async def settle(self) -> None:
        """Wait until every delivery begun for this call has finished (no wait when none is)."""
        while self.deliveries:
            self.settled = anyio.Event()
            await self.settled.wait()

    def end(self) -> None:
        """The call is over: cancel what is still relayed for it."""
        self.open = False
        if self._scopes:
            for scope in list(self._scopes):
                scope.cancel()

    def __enter__(self) -> Call:
        assert self._calls is not None
        self._calls.setdefault(self.connection_id, set()).add(self)
        self._token = CURRENT_CALL.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._calls is not None and self._token is not None
        CURRENT_CALL.reset(self._token)
        calls = self._calls.get(self.connection_id)
        if calls is not None:
            calls.discard(self)
            if not calls:
                del self._calls[self.connection_id]
        self.end()


def _refused(message: str, code: str, **data: Any) -> types.ErrorData:
    return types.ErrorData(code=types.INVALID_REQUEST, message=message, data={"code": code, **data})


def _without_progress_token(request: types.InputRequest) -> tuple[types.InputRequest, Any]:
    """``request`` without the upstream's progress token (meaningful only on the upstream
    connection; the downstream session mints its own), and that token."""
    params = request.params
    meta = dict(params.meta or {}) if params is not None else {}
    token = meta.pop("progressToken", None)
    if token is None:
        token = meta.pop("progress_token", None)
    if token is None or params is None:
        return request, None
    stripped = params.model_copy(update={"meta": meta or None})
    return request.model_copy(update={"params": stripped}), token


def _result_type(request: types.InputRequest) -> type[Any]:
    if isinstance(request, types.CreateMessageRequest):
        wants_tools = bool(request.params.tools or request.params.tool_choice)
        return types.CreateMessageResultWithTools if wants_tools else types.CreateMessageResult
    if isinstance(request, types.ElicitRequest):
        return types.ElicitResult
    return types.ListRootsResult


class Relay:
    """The front door's :class:`~reconciler.peer.UpstreamPeer` (contract in the module
    docstring). ``on_log`` receives each log record with its attribution (the log relay);
    ``bindings`` is the live binding table (where elicitation-complete notices go). Requests of
    calls run as held exchanges are handed to the exchange (``Call.exchange``)."""

    def __init__(
        self,
        *,
        on_log: Callable[
            [Call | Ambiguous | None, UpstreamConnection, types.LoggingMessageNotificationParams], Awaitable[None]
        ],
        bindings: Mapping[str, Binding],
    ) -> None:
        self._on_log = on_log
        self._bindings = bindings
        self._calls: dict[str, set[Call]] = {}
        self._elicitations: OrderedDict[tuple[str, str], str] = OrderedDict()  # (conn, id) → binding key

    # -- calls -------------------------------------------------------------------------------

    def call(
        self, binding: Binding, ctx: ServerRequestContext[Any] | None, conn: UpstreamConnection, exchange: Any = None
    ) -> Call:
        """``with relay.call(...) as call:`` registers one forwarded operation on ``conn`` for the
        block (O(1), no await): messages its upstream sends meanwhile are attributed to it.
        Leaving the block ends the call (what is still relayed for it is cancelled)."""
        call = Call(binding, ctx, conn.connection_id, exchange)
        call._calls = self._calls
        return call

    def in_flight(self, conn: UpstreamConnection) -> int:
        """How many forwarded operations are in flight on ``conn`` now."""
        return len(self._calls.get(conn.connection_id, ()))

    def attribute(self, conn: UpstreamConnection) -> Call | Ambiguous | None:
        """The call a message arriving on ``conn`` now belongs to (rules in the module docstring)."""
        call = CURRENT_CALL.get()
        if call is not None and call.connection_id == conn.connection_id:
            return call  # carried on the call's own response stream
        calls = self._calls.get(conn.connection_id)
        if not calls:
            return None
        if len(calls) == 1:
            return next(iter(calls))
        return AMBIGUOUS

    # -- the UpstreamPeer side ---------------------------------------------------------------

    async def on_request(
        self, conn: UpstreamConnection, request: types.InputRequest, request_id: types.RequestId
    ) -> PeerAnswer | types.ErrorData:
        """Answer one server→client request from ``conn`` (see the module docstring)."""
        kind = request_kind(request)
        answer = await self._answer(conn, request, kind)
        outcome = "error" if isinstance(answer, types.ErrorData) else "ok"
        if isinstance(answer, types.ErrorData) and isinstance(answer.data, dict):
            outcome = str(answer.data.get("code", "error"))
        relayed(kind, outcome, conn.source, getattr(self.attribute(conn), "binding", None))  # metric + audit
        return answer

    async def _answer(
        self, conn: UpstreamConnection, request: types.InputRequest, kind: str
    ) -> PeerAnswer | types.ErrorData:
        target = self.attribute(conn)
        if isinstance(target, str):  # AMBIGUOUS
            return _refused(
                f"the gateway cannot tell which call this {kind} request belongs to: "
                f"{self.in_flight(conn)} calls are in flight on this connection and its transport does not say",
                "not_attributable",
            )
        if target is None:
            if kind == "roots":
                return no_roots(conn.source)  # (configured roots never get here: the connection answers)
            return _refused(f"{kind} requests are relayed only while the gateway serves a call", "no_call")
        if not target.open:
            return _refused(f"the call this {kind} request belongs to has ended", "call_ended")
        if target.exchange is not None:
            missing = missing_from(target.exchange.capabilities, request)
            if missing is not None:  # refused now: the client could not answer it anyway
                return _refused(
                    f"the downstream client does not support {missing}", "capability_missing", capability=missing
                )
            answer: PeerAnswer | types.ErrorData = await target.exchange.ask(request)
            return answer
        if target.binding.era != "legacy" or target.ctx is None:
            return _refused(
                f"the downstream client cannot receive {kind} requests", "capability_missing", capability=kind
            )
        return await self.ask_downstream(target, conn, request)

    async def on_log(self, conn: UpstreamConnection, params: types.LoggingMessageNotificationParams) -> None:
        """Hand a log record to the log relay with its attribution (decided before any await)."""
        await self._on_log(self.attribute(conn), conn, params)

    async def on_notification(self, conn: UpstreamConnection, notification: types.ServerNotification) -> None:
        """Route ``notifications/elicitation/complete`` to the legacy session its URL elicitation
        was relayed to (a 2026-era client has no channel for it)."""
        if not isinstance(notification, types.ElicitCompleteNotification):
            return
        key = self._elicitations.pop((conn.connection_id, notification.params.elicitation_id), None)
        binding = self._bindings.get(key) if key is not None else None
        if binding is None or binding.conn is None:
            return
        try:
            with anyio.fail_after(5):
                await link.push_elicitation_complete(binding.conn, notification.params.elicitation_id)
        except Exception:
            log.info("session %s: elicitation-complete push failed", binding.session.id)

    # -- asking a legacy downstream ----------------------------------------------------------

    async def ask_downstream(
        self, call: Call, conn: UpstreamConnection, request: types.InputRequest
    ) -> PeerAnswer | types.ErrorData:
        """Send ``request`` to the call's (legacy) client on the call's own request stream and
        return its answer; the upstream's progress token is swapped for the session's own, and
        the client's progress goes back up. Cancelled when the call ends."""
        ctx = call.ctx
        assert ctx is not None
        kind = request_kind(request)
        missing = missing_capability(ctx, request)
        if missing is not None:
            return _refused(
                f"the downstream client does not support {missing}", "capability_missing", capability=missing
            )
        downstream_request, upstream_token = _without_progress_token(request)
        progress: Any = None
        relaying = Call(call.binding, None, conn.connection_id)  # counts progress still going up
        if upstream_token is not None:

            async def progress(done: float, total: float | None, message: str | None) -> None:
                relaying.begin_delivery()  # before any await: the answer waits for it
                try:
                    await conn.notify(
                        types.ProgressNotification(
                            params=types.ProgressNotificationParams(
                                progress_token=upstream_token, progress=done, total=total, message=message
                            )
                        )
                    )
                except Exception:
                    pass  # progress is best effort
                finally:
                    relaying.end_delivery()

        if (
            isinstance(request, types.ElicitRequest)
            and isinstance(request.params, types.ElicitRequestURLParams)
            and request.params.elicitation_id
        ):
            self._remember_elicitation(conn, request.params.elicitation_id, call.binding.key)
        request_id = f"gw-relay-{next(_request_ids)}"  # a string id never collides with the SDK's own
        opts: CallOptions = {"request_id": request_id}
        if progress is not None:
            opts["on_progress"] = progress
        params = downstream_request.model_dump(by_alias=True, mode="json", exclude_none=True).get("params")
        with anyio.CancelScope() as scope:
            call.scopes.add(scope)
            try:
                raw = await link.ask_client(ctx, downstream_request.method, params, opts)
                result: PeerAnswer = _result_type(request).model_validate(raw, by_name=False)
                await relaying.settle()  # the client's progress goes up before its answer
                return result
            except MCPError as exc:
                return exc.error  # the downstream client's own answer, passed up as it is
            except Exception as exc:
                log.info(
                    "relaying a %s request to session %s failed: %s", kind, call.binding.session.id, type(exc).__name__
                )
                return types.ErrorData(code=types.INTERNAL_ERROR, message=f"relaying the {kind} request failed")
            except BaseException:
                # Withdrawn (the upstream cancelled it). The SDK's own cancel rides the call's
                # stream, which streamable HTTP may have closed: repeat it where the client
                # still listens (the session's standalone channel).
                await self._withdraw(call, request_id)
                raise
            finally:
                call.scopes.discard(scope)
        await self._withdraw(call, request_id)  # withdrawn because the call ended
        return _refused(f"the call this {kind} request belongs to has ended", "call_ended")

    async def _withdraw(self, call: Call, request_id: str) -> None:
        conn = call.binding.conn
        if conn is None or call.binding.http_session_id is None:
            return  # stdio and in-memory carry the SDK's own cancellation
        with anyio.CancelScope(shield=True), anyio.move_on_after(2), contextlib.suppress(Exception):
            await link.push_cancelled(conn, request_id, "the call this request belongs to ended")

    def _remember_elicitation(self, conn: UpstreamConnection, elicitation_id: str, binding_key: str) -> None:
        self._elicitations[(conn.connection_id, elicitation_id)] = binding_key
        while len(self._elicitations) > ELICITATIONS_REMEMBERED:
            self._elicitations.popitem(last=False)
