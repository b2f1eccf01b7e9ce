"""The MCP front door: one downstream MCP server over the engine (I4, I9, I10, I12).

Every operation: find the caller's session → choose its generation (a revision asked for in
``_meta``, the ``MCP-Reconciler-Revision`` header, the session's pin, or the current one) →
look the exposed name up in that generation's immutable routing table → check the grant →
pin → forward on the source's live connection → release. Results carry
``_meta["io.mcp-reconciler/revision"]``.

Sessions (ADR 0006): a 2025-11-25 client's connection is one gateway session; a 2026-07-28
(sessionless) client is identified by its bearer token, or shares one anonymous session per
front door when it sends none. When a session's view changes it gets the matching
``list_changed`` — pushed on its connection (legacy) or on its own ``subscriptions/listen`` bus
(new era) — coalesced per session, and held until a legacy HTTP client's GET stream is open."""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ToolsListChanged,
)
from mcp.shared.dispatcher import ProgressFnT

from mcp_reconciler.api.errors import UpstreamUnavailable, to_mcp_error
from mcp_reconciler.api.version import __version__
from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.authority import Authority, GrantPolicy, Session, View
from mcp_reconciler.reconciler.errors import ReconcilerClosedError
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import CatalogEntry, EntryKind
from mcp_reconciler.reconciler.pins import OperationDeadlineError
from mcp_reconciler.reconciler.reconcile import Reconciler
from mcp_reconciler.reconciler.runtime import LiveGeneration
from mcp_reconciler.reconciler.upstream import UpstreamConnection

log = logging.getLogger("mcp_reconciler.frontdoor")
_operation_duration = telemetry.meter.create_histogram(
    "frontdoor.operation.duration", unit="s", description="Downstream operations (call/read/get), by kind and outcome"
)

REVISION_META = "io.mcp-reconciler/revision"
DRIFT_META = "io.mcp-reconciler/drifted"
REVISION_HEADER = "mcp-reconciler-revision"
PAGE_SIZE = 1000
PROGRESS_BACKLOG = 1024  # progress notifications buffered per forwarded call
_SPEC_META_PREFIX = "io.modelcontextprotocol/"

StatusFn = Callable[[], Awaitable[dict[str, Any]]]
RefreshFn = Callable[[], Awaitable[int | None]]


class GatewayServer(Server[Any]):
    """Advertises ``listChanged`` for tools, resources and prompts to legacy clients, even when
    the transport asks for initialization options without arguments (SDK pitfall)."""

    def create_initialization_options(
        self, notification_options: NotificationOptions | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        return super().create_initialization_options(
            notification_options
            or NotificationOptions(prompts_changed=True, resources_changed=True, tools_changed=True),
            *args,
            **kwargs,
        )


@dataclass(eq=False)
class Binding:
    """One downstream identity bound to a gateway session, with its notification channel."""

    session: Session
    era: Literal["legacy", "modern"]
    key: str
    owned: bool = False  # the session was created for this binding (not a control-API session)
    conn: Any = None  # legacy: the SDK's per-connection object (pushes ride on it)
    http_session_id: str | None = None
    last_view: View | None = None
    pending: set[EntryKind] = field(default_factory=set)
    notifications: int = 0


class FrontDoor:
    def __init__(
        self,
        rec: Reconciler,
        authority: Authority,
        *,
        grant_policy: GrantPolicy = GrantPolicy.CURRENT,
        expose_control_tools: bool = False,
        status: StatusFn | None = None,
        refresh: RefreshFn | None = None,
        transport: Literal["http", "stdio", "memory"] = "http",
    ) -> None:
        self.rec = rec
        self.authority = authority
        self.grant_policy = grant_policy
        self.expose_control_tools = expose_control_tools
        self._status = status
        self._refresh = refresh
        self.transport = transport
        self.manager: Any = None  # StreamableHTTPSessionManager, set by the HTTP app (GET-stream probe)
        self.bindings: dict[str, Binding] = {}
        self._by_token: dict[str, Binding] = {}
        self._buses: dict[str, InMemorySubscriptionBus] = {}
        self._listeners: dict[str, ListenHandler] = {}
        self._wake = anyio.Event()
        self._tool_cache: dict[tuple[str, str, str], Any] = {}
        self.notifications_sent = 0
        self.server = GatewayServer(
            "mcp-reconciler",
            version=__version__,
            instructions="A gateway over several MCP servers; names are <source>__<name>.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_subscriptions_listen=self._listen,
            # O(1) schema lookup for the SDK's per-call header check in the 2026 era; without it
            # the SDK runs our whole tools/list (O(granted names)) before every call.
            get_tool_input_schema=self._tool_input_schema,
        )
        self.server.middleware.append(self._middleware)
        self._remove_listener = rec.runtime.add_listener(lambda new, old: self._wake.set())

    # -- lifecycle: the notifier -------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The per-session notifier; run it in the owner's task group for the server's lifetime."""
        task_status.started()
        try:
            while True:
                with anyio.move_on_after(0.1 if self._any_pending() else float("inf")):
                    await self._wake.wait()
                self._wake = anyio.Event()
                await self._notify_all()
        finally:
            self._remove_listener()

    def forget_session(self, session_id: str) -> None:
        """Drop every binding of a session that was deleted (its token no longer authenticates)."""
        for key, binding in list(self.bindings.items()):
            if binding.session.id == session_id:
                del self.bindings[key]
                self._buses.pop(key, None)
                handler = self._listeners.pop(key, None)
                if handler is not None:
                    handler.close()

    def _tool_input_schema(self, name: str) -> Mapping[str, Any] | None:
        live = self.rec.runtime.current
        entry = live.generation.tools.get(name) if live is not None else None
        if entry is None:
            return None
        key = ("schema", entry.exposed_name, entry.digest)
        cached = self._tool_cache.get(key)
        if cached is None:
            cached = self._tool_cache[key] = json.loads(entry.raw).get("inputSchema") or {}
        return cached or None

    def touch(self) -> None:
        """Re-evaluate every session's view now (after grants change outside a publication)."""
        self._wake.set()

    def _any_pending(self) -> bool:
        return any(b.pending for b in self.bindings.values())

    async def _notify_all(self) -> None:
        live = self.rec.runtime.current
        if live is None:
            return
        for binding in list(self.bindings.values()):
            if binding.session.pinned_revision is not None:
                continue  # a pinned session's view does not follow publications
            view = self.authority.view(binding.session, live.generation)
            binding.pending |= view.changed_kinds(binding.last_view)
            binding.last_view = view
            if binding.pending:
                await self._deliver(binding)

    async def _deliver(self, binding: Binding) -> None:
        kinds = binding.pending
        if binding.era == "legacy":
            if binding.conn is None or not self._get_stream_open(binding):
                return  # held until the client's GET stream is open; retried on the next tick
            try:
                if EntryKind.TOOL in kinds:
                    await binding.conn.send_tool_list_changed()
                if kinds & {EntryKind.RESOURCE, EntryKind.RESOURCE_TEMPLATE}:
                    await binding.conn.send_resource_list_changed()
                if EntryKind.PROMPT in kinds:
                    await binding.conn.send_prompt_list_changed()
            except Exception:
                log.info("session %s: list_changed push failed", binding.session.id)
                return
        else:
            bus = self._buses.get(binding.key)
            if bus is None:
                # No listen stream yet: the next listen starts from a fresh list anyway. Drop the
                # pending kinds, or the notifier would re-poll this binding every tick forever.
                binding.pending = set()
                return
            if EntryKind.TOOL in kinds:
                await bus.publish(ToolsListChanged())
            if kinds & {EntryKind.RESOURCE, EntryKind.RESOURCE_TEMPLATE}:
                await bus.publish(ResourcesListChanged())
            if EntryKind.PROMPT in kinds:
                await bus.publish(PromptsListChanged())
        binding.notifications += 1
        self.notifications_sent += 1
        binding.pending = set()

    def _get_stream_open(self, binding: Binding) -> bool:
        if binding.http_session_id is None or self.manager is None:
            return True  # stdio / in-memory: the connection itself carries pushes
        transport = self.manager._server_instances.get(binding.http_session_id)
        if transport is None:
            binding.pending = set()  # the session is gone
            return False
        from mcp.server.streamable_http import GET_STREAM_KEY

        return GET_STREAM_KEY in transport._request_streams

    # -- sessions ----------------------------------------------------------------------------

    async def _middleware(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        result = await call_next(ctx)
        if ctx.method == "notifications/initialized":
            with contextlib.suppress(MCPError):
                self._binding(ctx)  # bind legacy sessions at the handshake, so pushes can reach them
        return result

    def _bearer(self, ctx: ServerRequestContext[Any]) -> str | None:
        request = ctx.request
        if request is None:
            return None
        auth = request.headers.get("authorization")
        if auth and auth.lower().startswith("bearer "):
            return str(auth[7:].strip())
        return None

    def _binding(self, ctx: ServerRequestContext[Any]) -> Binding:
        token = self._bearer(ctx)
        if token is not None:
            session = self.authority.by_token(token)
            if session is None:
                raise MCPError(-32018, "invalid session token", {"code": "invalid_token", "retryable": False})
        legacy = str(ctx.protocol_version).startswith("2025")
        if legacy:
            conn = ctx.session._connection
            key = conn.session_id or conn.state.setdefault("gw.key", uuid.uuid4().hex)
            binding = self.bindings.get(key)
            if binding is None:
                binding = self._bind("legacy", key, token, self._header_generation(ctx))
                binding.conn = conn
                binding.http_session_id = conn.session_id
                conn.exit_stack.callback(self._unbind, key)
            return binding
        key = f"token:{token}" if token is not None else ("anonymous" if self.transport == "http" else "local")
        binding = self.bindings.get(key)
        if binding is None:
            binding = self._bind("modern", key, token)
        return binding

    def _header_generation(self, ctx: ServerRequestContext[Any]) -> Generation | None:
        """The live generation a client's ``MCP-Reconciler-Revision`` header names, if any: a
        connection that asks for a revision from its first request gets its grants from that
        revision (policy ``current``: the names it can see when the session is created), not
        from a newer current generation that may lack them."""
        wanted = ctx.request.headers.get(REVISION_HEADER) if ctx.request is not None else None
        if wanted is None:
            return None
        try:
            return self.rec.runtime.get(int(wanted)).generation
        except Exception:
            return None  # not live or not a number: the request itself answers the error

    def _bind(
        self, era: Literal["legacy", "modern"], key: str, token: str | None, grants_from: Generation | None = None
    ) -> Binding:
        live = self.rec.runtime.current
        gen = live.generation if live is not None else None
        session = self.authority.by_token(token) if token is not None else None
        owned = session is None  # created for this connection: it ends with the connection
        if session is None:
            session = self.authority.create(f"mcp:{key}", grants_from or gen, policy=self.grant_policy)
        binding = Binding(session=session, era=era, key=key, owned=owned)
        binding.last_view = self.authority.view(session, gen) if gen is not None else None
        self.bindings[key] = binding
        return binding

    def _unbind(self, key: str) -> None:
        binding = self.bindings.pop(key, None)
        if binding is not None and binding.owned:
            self.authority.remove(binding.session.id)

    def _generation(
        self, ctx: ServerRequestContext[Any], session: Session, meta: Mapping[str, Any] | None
    ) -> LiveGeneration:
        runtime = self.rec.runtime
        wanted: Any = (meta or {}).get(REVISION_META)
        if wanted is None and ctx.request is not None:
            wanted = ctx.request.headers.get(REVISION_HEADER)
        if wanted is None:
            wanted = session.pinned_revision
        if wanted is not None:
            try:
                revision = int(wanted)
            except (TypeError, ValueError):
                raise MCPError(
                    -32602, "the requested revision must be an integer", {"code": "invalid_revision"}
                ) from None
            try:
                return runtime.get(revision)
            except Exception as exc:
                raise to_mcp_error(exc) from None
        if runtime.closed:
            raise to_mcp_error(ReconcilerClosedError())
        live = runtime.current
        if live is None:
            raise MCPError(
                -32015, "no catalog is published yet; retry shortly", {"code": "starting", "retryable": True}
            )
        return live

    # -- lists -------------------------------------------------------------------------------

    def _page(self, items: list[Any], cursor: str | None, revision: int) -> tuple[list[Any], str | None]:
        start = 0
        if cursor:
            rev_s, _, off = cursor.partition(":")
            if rev_s != str(revision) or not off.isdigit():
                raise MCPError(-32602, "stale or invalid cursor; list again from the start", {"code": "invalid_cursor"})
            start = int(off)
        end = start + PAGE_SIZE
        return items[start:end], (f"{revision}:{end}" if end < len(items) else None)

    def _definition(self, entry: CatalogEntry, model: type[Any], name_field: str, drifted: bool) -> Any:
        key = (entry.kind.value, entry.exposed_name, entry.digest + (":d" if drifted else ""))
        cached = self._tool_cache.get(key)
        if cached is None:
            data = json.loads(entry.raw)
            data[name_field] = entry.exposed_name
            if drifted:
                data["_meta"] = {**(data.get("_meta") or {}), DRIFT_META: True}
            cached = model.model_validate(data)
            if len(self._tool_cache) > 50_000:
                self._tool_cache.clear()
            self._tool_cache[key] = cached
        return cached

    def _list(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None, kind: EntryKind
    ) -> tuple[list[Any], str | None, int]:
        binding = self._binding(ctx)
        live = self._generation(ctx, binding.session, params.meta if params is not None else None)
        view = self.authority.view(binding.session, live.generation)
        model, name_field = _MODELS[kind]
        items = [
            self._definition(e, model, name_field, f"{kind.value}:{e.exposed_name}" in view.drifted)
            for e in view.entries[kind]
        ]
        if kind is EntryKind.TOOL and self.expose_control_tools:
            items = _CONTROL_TOOLS + items
        page, nxt = self._page(items, params.cursor if params is not None else None, live.revision)
        return page, nxt, live.revision

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        page, nxt, rev = self._list(ctx, params, EntryKind.TOOL)
        return types.ListToolsResult(tools=page, next_cursor=nxt, _meta={REVISION_META: rev})

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        page, nxt, rev = self._list(ctx, params, EntryKind.RESOURCE)
        return types.ListResourcesResult(resources=page, next_cursor=nxt, _meta={REVISION_META: rev})

    async def _list_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        page, nxt, rev = self._list(ctx, params, EntryKind.RESOURCE_TEMPLATE)
        return types.ListResourceTemplatesResult(resource_templates=page, next_cursor=nxt, _meta={REVISION_META: rev})

    async def _list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        page, nxt, rev = self._list(ctx, params, EntryKind.PROMPT)
        return types.ListPromptsResult(prompts=page, next_cursor=nxt, _meta={REVISION_META: rev})

    # -- operations --------------------------------------------------------------------------

    async def _forward(
        self,
        ctx: ServerRequestContext[Any],
        kind: EntryKind,
        name: str,
        meta: Mapping[str, Any] | None,
        build: Callable[[CatalogEntry, Any], Any],
        result_type: type[Any],
    ) -> Any:
        """One operation, traced: a span per call and a duration histogram by kind and outcome."""
        t0 = anyio.current_time()
        outcome = "ok"
        with telemetry.tracer.start_as_current_span("frontdoor.operation", attributes={"mcp.kind": kind.value}) as span:
            try:
                result = await self._forward_inner(ctx, kind, name, meta, build, result_type)
                meta_out = result.meta or {}
                span.set_attribute("revision", meta_out.get(REVISION_META, -1))
                return result
            except MCPError as exc:
                outcome = (
                    str((exc.error.data or {}).get("code", "error")) if isinstance(exc.error.data, dict) else "error"
                )
                span.set_attribute("error.code", outcome)
                raise
            except BaseException:
                outcome = "cancelled"
                raise
            finally:
                _operation_duration.record(anyio.current_time() - t0, {"kind": kind.value, "outcome": outcome})

    async def _forward_inner(
        self,
        ctx: ServerRequestContext[Any],
        kind: EntryKind,
        name: str,
        meta: Mapping[str, Any] | None,
        build: Callable[[CatalogEntry, Any], Any],
        result_type: type[Any],
    ) -> Any:
        binding = self._binding(ctx)
        live = self._generation(ctx, binding.session, meta)
        conn: Any = None
        try:
            resolved = self.authority.resolve(binding.session, live.generation, kind, name)
            entry = resolved.entry
            state = live.generation.source_state(entry.source)
            conn = state.connection if state is not None else None
            if not isinstance(conn, UpstreamConnection) or not conn.alive:
                raise UpstreamUnavailable()  # fail fast: never an operation on a closed connection (I4)
            request = build(entry, _forwardable(meta))
            async with live.operation(deadline_s=self.rec.bounds.operation_deadline_s):
                call_s = _call_timeout(conn)
                if _progress_token(meta) is None:
                    result = await conn.send(request, result_type, timeout_s=call_s)
                else:
                    result = await _send_with_progress(conn, request, result_type, ctx, call_s)
        except MCPError as exc:
            if exc.error.code == types.REQUEST_TIMEOUT:
                # The source's own call timeout (``timeouts.call_s``) ran out; the SDK already
                # cancelled the upstream request.
                raise to_mcp_error(OperationDeadlineError(_call_timeout(conn) or 0.0), revision=live.revision) from None
            if _connection_lost(exc, conn):
                # The SDK's own "Connection closed", not upstream text: the upstream died under the call.
                log.info("upstream %s: connection lost during a call", getattr(conn, "source", "?"))
                raise to_mcp_error(UpstreamUnavailable(), revision=live.revision) from None
            raise to_mcp_error(exc, revision=live.revision) from None
        except Exception as exc:
            raise to_mcp_error(exc, revision=live.revision) from None
        out_meta = {k: v for k, v in (result.meta or {}).items() if not k.startswith(_SPEC_META_PREFIX)}
        out_meta[REVISION_META] = live.revision
        if resolved.drifted:
            out_meta[DRIFT_META] = True
        return result.model_copy(update={"meta": out_meta})

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if self.expose_control_tools and params.name in _CONTROL_NAMES:
            return await self._control_tool(params.name)
        return await self._forward(  # type: ignore[no-any-return]
            ctx,
            EntryKind.TOOL,
            params.name,
            params.meta,
            lambda e, m: types.CallToolRequest(
                params=types.CallToolRequestParams(name=e.upstream_name, arguments=params.arguments, _meta=m)
            ),
            types.CallToolResult,
        )

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return await self._forward(  # type: ignore[no-any-return]
            ctx,
            EntryKind.RESOURCE,
            str(params.uri),
            params.meta,
            lambda e, m: types.ReadResourceRequest(params=types.ReadResourceRequestParams(uri=params.uri, _meta=m)),
            types.ReadResourceResult,
        )

    async def _get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        return await self._forward(  # type: ignore[no-any-return]
            ctx,
            EntryKind.PROMPT,
            params.name,
            params.meta,
            lambda e, m: types.GetPromptRequest(
                params=types.GetPromptRequestParams(name=e.upstream_name, arguments=params.arguments, _meta=m)
            ),
            types.GetPromptResult,
        )

    async def _control_tool(self, name: str) -> types.CallToolResult:
        if name == "gateway_status" and self._status is not None:
            body: Any = await self._status()
        elif name == "gateway_refresh" and self._refresh is not None:
            body = {"revision": await self._refresh()}
        else:
            raise MCPError(-32602, f"unknown tool: {name}", {"code": "unknown_name"})
        text = json.dumps(body, default=str)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            _meta={REVISION_META: self.rec.runtime.current_revision},
        )

    # -- new-era change streams --------------------------------------------------------------

    async def _listen(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        binding = self._binding(ctx)
        handler = self._listeners.get(binding.key)
        if handler is None:
            bus = self._buses.setdefault(binding.key, InMemorySubscriptionBus())
            handler = self._listeners[binding.key] = ListenHandler(bus)
        return await handler(ctx, params)


def _call_timeout(conn: Any) -> float | None:
    """The source's per-call timeout (``timeouts.call_s`` in its config), if any."""
    timeouts = conn.spec.transport.get("timeouts") if isinstance(conn, UpstreamConnection) else None
    value = timeouts.get("call_s") if timeouts else None
    return float(value) if value is not None else None


async def _send_with_progress(
    conn: UpstreamConnection,
    request: Any,
    result_type: type[Any],
    ctx: ServerRequestContext[Any],
    timeout_s: float | None = None,
) -> Any:
    """Forward ``request`` and relay the upstream's progress to the caller, in order, all of it
    before the result. The SDK runs each progress callback as its own task; they only enqueue
    (synchronously, in arrival order) and one pump relays, drained before the result returns.
    Progress arriving after the upstream's result has nowhere to go and is dropped, and so is
    progress beyond a bounded backlog (an upstream flooding a slow client costs bounded memory;
    what is relayed stays in order)."""
    send, receive = anyio.create_memory_object_stream[tuple[float, float | None, str | None]](PROGRESS_BACKLOG)

    async def enqueue(progress: float, total: float | None, message: str | None) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.WouldBlock):
            send.send_nowait((progress, total, message))

    async def pump() -> None:
        async with receive:
            async for progress, total, message in receive:
                await ctx.session.report_progress(progress, total, message)

    callback: ProgressFnT = enqueue
    async with anyio.create_task_group() as tg:
        tg.start_soon(pump)
        with send:  # closing it lets the pump drain and end
            return await conn.send(request, result_type, timeout_s=timeout_s, progress_callback=callback)


def _connection_lost(exc: MCPError, conn: Any) -> bool:
    """Whether ``exc`` reports the upstream connection ending rather than an upstream answer."""
    if isinstance(conn, UpstreamConnection) and not conn.alive:
        return True
    return (
        exc.error.code == types.CONNECTION_CLOSED
        and exc.error.message == "Connection closed"
        and exc.error.data is None
    )


#: The SDK hands request ``_meta`` to handlers with the progress token under its Python name
#: (``progress_token``); the wire name is accepted too, for callers that build ``_meta`` by hand.
_PROGRESS_KEYS = ("progress_token", "progressToken")


def _progress_token(meta: Mapping[str, Any] | None) -> Any:
    if not meta:
        return None
    return next((meta[k] for k in _PROGRESS_KEYS if meta.get(k) is not None), None)


def _forwardable(meta: Mapping[str, Any] | None) -> Any:
    """Request ``_meta`` safe to pass upstream: no progress token (the upstream session mints
    its own; forwarding the downstream's would route the upstream's progress to whichever
    request on the shared upstream connection has that id), no protocol keys, no gateway keys."""
    if not meta:
        return None
    out = {
        k: v
        for k, v in dict(meta).items()
        if k not in _PROGRESS_KEYS and not k.startswith(_SPEC_META_PREFIX) and not k.startswith("io.mcp-reconciler/")
    }
    return out or None


_MODELS: dict[EntryKind, tuple[type[Any], str]] = {
    EntryKind.TOOL: (types.Tool, "name"),
    EntryKind.RESOURCE: (types.Resource, "uri"),
    EntryKind.RESOURCE_TEMPLATE: (types.ResourceTemplate, "uriTemplate"),
    EntryKind.PROMPT: (types.Prompt, "name"),
}

_CONTROL_TOOLS: list[Any] = [
    types.Tool(
        name="gateway_status",
        description="mcp-reconciler provenance: revision, freshness, sources, warnings (built in).",
        input_schema={"type": "object"},
    ),
    types.Tool(
        name="gateway_refresh",
        description="Reconcile every source now and return the resulting revision (built in).",
        input_schema={"type": "object"},
    ),
]
_CONTROL_NAMES = frozenset(t.name for t in _CONTROL_TOOLS)
