"""Forwarding: one downstream operation (call, read, get) run on one upstream connection.

Every operation: find the caller's binding → choose its generation (``revisions``) → resolve the
exposed name in that generation's immutable routing table and check the grant (I9) → pin the
generation (I4) → send on the source's live connection → release. The upstream's own protocol
keys and progress token never travel (the upstream session mints its own token); the result
carries the revision it ran on, and the drift flag when the definition changed since the grant.
Resource URIs cross in the source's namespace (``reconciler/uris.py``): a read is sent with the
upstream URI, and URIs in results come back exposed.

Failures reach the client sanitized (I12): an upstream that is not connected fails fast
(``upstream_unavailable``, never an operation on a closed connection), one that dies under the
call maps to the same, the source's own ``timeouts.call_s`` running out maps to
``deadline_exceeded``, and anything else goes through ``api.errors.to_mcp_error``.

Progress is relayed in order and all of it before the result, with a bounded backlog
(:data:`PROGRESS_BACKLOG`): an upstream flooding a slow client costs bounded memory."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.shared.dispatcher import ProgressFnT

from mcp_reconciler.api.errors import UpstreamUnavailable, to_mcp_error
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.revisions import DRIFT_META, REVISION_META, choose_generation
from mcp_reconciler.api.frontdoor.sessions import Sessions
from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.authority import Authority
from mcp_reconciler.reconciler.model import CatalogEntry, EntryKind
from mcp_reconciler.reconciler.pins import OperationDeadlineError
from mcp_reconciler.reconciler.upstream import UpstreamConnection
from mcp_reconciler.reconciler.uris import rewrite_result, upstream_uri

log = logging.getLogger("mcp_reconciler.frontdoor")
_operation_duration = telemetry.meter.create_histogram(
    "frontdoor.operation.duration", unit="s", description="Downstream operations (call/read/get), by kind and outcome"
)

PROGRESS_BACKLOG = 1024  # progress notifications buffered per forwarded call
_SPEC_META_PREFIX = "io.modelcontextprotocol/"

#: Builds the upstream request for a resolved entry, given the ``_meta`` that may travel.
RequestBuilder = Callable[[CatalogEntry, Any], Any]


class Forwarder:
    """The call/read/get handlers of the front door's MCP server (contract in the module
    docstring). Every operation is traced: a ``frontdoor.operation`` span and a duration
    histogram by kind and outcome."""

    def __init__(self, catalog: CatalogAccess, authority: Authority, sessions: Sessions) -> None:
        self._catalog = catalog
        self._authority = authority
        self._sessions = sessions

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """``tools/call``, forwarded under the tool's upstream name."""
        return await self.forward(  # type: ignore[no-any-return]
            ctx,
            EntryKind.TOOL,
            params.name,
            params.meta,
            lambda e, m: types.CallToolRequest(
                params=types.CallToolRequestParams(name=e.upstream_name, arguments=params.arguments, _meta=m)
            ),
            types.CallToolResult,
        )

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        """``resources/read``, forwarded to the source that serves the URI."""
        return await self.forward(  # type: ignore[no-any-return]
            ctx,
            EntryKind.RESOURCE,
            str(params.uri),
            params.meta,
            lambda e, m: types.ReadResourceRequest(
                params=types.ReadResourceRequestParams(uri=upstream_uri(e, params.uri), _meta=m)
            ),
            types.ReadResourceResult,
        )

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        """``prompts/get``, forwarded under the prompt's upstream name."""
        return await self.forward(  # type: ignore[no-any-return]
            ctx,
            EntryKind.PROMPT,
            params.name,
            params.meta,
            lambda e, m: types.GetPromptRequest(
                params=types.GetPromptRequestParams(name=e.upstream_name, arguments=params.arguments, _meta=m)
            ),
            types.GetPromptResult,
        )

    async def forward(
        self,
        ctx: ServerRequestContext[Any],
        kind: EntryKind,
        name: str,
        meta: Mapping[str, Any] | None,
        build: RequestBuilder,
        result_type: type[Any],
    ) -> Any:
        """Run one operation on the exposed ``name`` of ``kind`` and return the upstream's result
        with the gateway's ``_meta``; raises a sanitized ``MCPError`` otherwise."""
        t0 = anyio.current_time()
        outcome = "ok"
        with telemetry.tracer.start_as_current_span("frontdoor.operation", attributes={"mcp.kind": kind.value}) as span:
            try:
                result = await self._forward(ctx, kind, name, meta, build, result_type)
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

    async def _forward(
        self,
        ctx: ServerRequestContext[Any],
        kind: EntryKind,
        name: str,
        meta: Mapping[str, Any] | None,
        build: RequestBuilder,
        result_type: type[Any],
    ) -> Any:
        binding = self._sessions.binding(ctx)
        live = choose_generation(self._catalog, ctx, binding.session, meta)
        conn: Any = None
        try:
            resolved = self._authority.resolve(binding.session, live.generation, kind, name)
            entry = resolved.entry
            state = live.generation.source_state(entry.source)
            conn = state.connection if state is not None else None
            if not isinstance(conn, UpstreamConnection) or not conn.alive:
                raise UpstreamUnavailable()  # fail fast: never an operation on a closed connection (I4)
            request = build(entry, forwardable(meta))
            async with live.operation(deadline_s=self._catalog.operation_deadline_s):
                call_s = call_timeout(conn)
                if progress_token(meta) is None:
                    result = await conn.send(request, result_type, timeout_s=call_s)
                else:
                    result = await send_with_progress(conn, request, result_type, ctx, call_s)
        except MCPError as exc:
            if exc.error.code == types.REQUEST_TIMEOUT:
                # The source's own call timeout (``timeouts.call_s``) ran out; the SDK already
                # cancelled the upstream request.
                raise to_mcp_error(OperationDeadlineError(call_timeout(conn) or 0.0), revision=live.revision) from None
            if connection_lost(exc, conn):
                # The SDK's own "Connection closed", not upstream text: the upstream died under the call.
                log.info("upstream %s: connection lost during a call", getattr(conn, "source", "?"))
                raise to_mcp_error(UpstreamUnavailable(), revision=live.revision) from None
            raise to_mcp_error(exc, revision=live.revision) from None
        except Exception as exc:
            raise to_mcp_error(exc, revision=live.revision) from None
        result = rewrite_result(result, conn.spec.uri_prefix)  # exposed URIs in links and contents
        out_meta = {k: v for k, v in (result.meta or {}).items() if not k.startswith(_SPEC_META_PREFIX)}
        out_meta[REVISION_META] = live.revision
        if resolved.drifted:
            out_meta[DRIFT_META] = True
        return result.model_copy(update={"meta": out_meta})


def call_timeout(conn: Any) -> float | None:
    """The source's per-call timeout (``timeouts.call_s`` in its config), if any."""
    timeouts = conn.spec.transport.get("timeouts") if isinstance(conn, UpstreamConnection) else None
    value = timeouts.get("call_s") if timeouts else None
    return float(value) if value is not None else None


async def send_with_progress(
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


def connection_lost(exc: MCPError, conn: Any) -> bool:
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


def progress_token(meta: Mapping[str, Any] | None) -> Any:
    """The caller's progress token in request ``_meta``, if it asked for progress."""
    if not meta:
        return None
    return next((meta[k] for k in _PROGRESS_KEYS if meta.get(k) is not None), None)


def forwardable(meta: Mapping[str, Any] | None) -> Any:
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
