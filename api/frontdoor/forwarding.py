"""Forwarding: one downstream operation (call, read, get) run on one upstream connection.

Every operation: find the caller's binding → choose its generation (``revisions``) → resolve the
exposed name in that generation's immutable routing table and check the grant (I9) → park a tool
call that needs an approval until answered (``approvals``, I22) → pin the generation (I4) → send
on the source's live connection → release. The upstream's own protocol keys and progress token
never travel (the upstream session mints its own); the result carries the revision it ran on,
and the drift flag when the definition changed since the grant.
Resource URIs cross in the source's namespace (``reconciler/uris.py``): a read is sent with the
upstream URI, and URIs in results come back exposed.

Failures reach the client sanitized (I12): an upstream that is not connected fails fast
(``upstream_unavailable``, never an operation on a closed connection), one that dies under the
call maps to the same, the source's own ``timeouts.call_s`` running out maps to
``deadline_exceeded``, and anything else goes through ``api.errors.to_mcp_error``.

Progress is relayed in order and all of it before the result, with a bounded backlog
(:data:`PROGRESS_BACKLOG`): an upstream flooding a slow client costs bounded memory.

What the upstream starts while serving the operation (sampling, elicitation, roots, log
records) is attributed to it through the ``relay`` (the operation is registered for its
duration) and reaches this caller only; log records still being relayed are delivered before
the result. A 2026-era upstream's ``InputRequiredResult`` is fulfilled for a legacy caller or
passed to a 2026 caller with its state sealed; a 2026 caller on a 2025-era upstream runs as a
held exchange (``exchanges``). ``raw=True`` (the data plane's ``tools/call``) keeps a simple result as JSON.
Every call, read and get passes ``rate_limits:`` here (ADR 0033), before anything is sent."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext

from mcp_reconciler.api.errors import UpstreamUnavailable, to_mcp_error
from mcp_reconciler.api.frontdoor.approvals import ApprovalGate
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.exchanges import Exchanges
from mcp_reconciler.api.frontdoor.logs import LOG_LEVEL_META, LogRelay
from mcp_reconciler.api.frontdoor.observe import OperationObserver, OpFacts, inject
from mcp_reconciler.api.frontdoor.passthrough import RawResult, simple_call_result
from mcp_reconciler.api.frontdoor.progress import PROGRESS_KEYS, progress_token, send_with_progress
from mcp_reconciler.api.frontdoor.relay import Relay, RelayError
from mcp_reconciler.api.frontdoor.revisions import DRIFT_META, REVISION_META, choose_generation
from mcp_reconciler.api.frontdoor.rounds import (
    HELD_PREFIX,
    INTERACTIVE,
    SEALED_PREFIX,
    Retry,
    Sealed,
    StateSeal,
    answer_input_required,
    invalid_state,
)
from mcp_reconciler.api.frontdoor.sessions import Sessions
from mcp_reconciler.reconciler.authority import Authority
from mcp_reconciler.reconciler.limiter import NO_SLOT, Limiter
from mcp_reconciler.reconciler.model import CatalogEntry, EntryKind
from mcp_reconciler.reconciler.pins import OperationDeadlineError, Pin
from mcp_reconciler.reconciler.upstream import UpstreamConnection
from mcp_reconciler.reconciler.uris import rewrite_result, upstream_uri

log = logging.getLogger("mcp_reconciler.frontdoor")

_SPEC_META_PREFIX = "io.modelcontextprotocol/"

#: Builds the upstream request for a resolved entry, given the ``_meta`` that may travel and the
#: extra params of a multi-round retry (``input_responses``, ``request_state``).
RequestBuilder = Callable[[CatalogEntry, Any, dict[str, Any]], Any]


class Forwarder:
    """The call/read/get handlers of the front door's MCP server (contract in the module
    docstring). Every operation is traced: a ``frontdoor.operation`` span and a duration
    histogram by kind and outcome."""

    def __init__(
        self,
        catalog: CatalogAccess,
        authority: Authority,
        sessions: Sessions,
        *,
        relay: Relay,
        exchanges: Exchanges,
        logs: LogRelay,
        seal: StateSeal | None = None,
        limiter: Limiter | None = None,
        observer: OperationObserver | None = None,
    ) -> None:
        self._catalog = catalog
        self._limiter = limiter or Limiter()
        self._authority = authority
        self._sessions = sessions
        self._relay = relay
        self._exchanges = exchanges
        self._logs = logs
        self._seal = seal or StateSeal()
        self.approvals = ApprovalGate(catalog)  # the one approval hook (ADR 0034)
        self._observer = observer or OperationObserver()

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams, *, raw: bool = False
    ) -> types.CallToolResult | types.InputRequiredResult | RawResult:
        """``tools/call``, forwarded under the tool's upstream name. ``raw``: a result that
        :func:`simple_call_result` accepts comes back as the upstream's JSON (a
        :class:`RawResult`), never built into a model the caller would only dump again."""
        build = lambda e, m, x: types.CallToolRequest(  # noqa: E731
            params=types.CallToolRequestParams(name=e.upstream_name, arguments=params.arguments, _meta=m, **x)
        )
        return await self.forward(  # type: ignore[no-any-return]
            ctx, EntryKind.TOOL, params.name, params, build, types.CallToolResult, raw=raw
        )

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult | types.InputRequiredResult:
        """``resources/read``, forwarded to the source that serves the URI."""
        build = lambda e, m, x: types.ReadResourceRequest(  # noqa: E731
            params=types.ReadResourceRequestParams(uri=upstream_uri(e, params.uri), _meta=m, **x)
        )
        return await self.forward(  # type: ignore[no-any-return]
            ctx, EntryKind.RESOURCE, str(params.uri), params, build, types.ReadResourceResult
        )

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult | types.InputRequiredResult:
        """``prompts/get``, forwarded under the prompt's upstream name."""
        return await self.forward(  # type: ignore[no-any-return]
            ctx,
            EntryKind.PROMPT,
            params.name,
            params,
            lambda e, m, x: types.GetPromptRequest(
                params=types.GetPromptRequestParams(name=e.upstream_name, arguments=params.arguments, _meta=m, **x)
            ),
            types.GetPromptResult,
        )

    async def forward(
        self,
        ctx: ServerRequestContext[Any],
        kind: EntryKind,
        name: str,
        params: Any,
        build: RequestBuilder,
        result_type: type[Any],
        *,
        op: str | None = None,
        shortcut: Callable[[UpstreamConnection], Any] | None = None,
        raw: bool = False,
    ) -> Any:
        """Run one operation on the exposed ``name`` of ``kind`` and return the upstream's result
        with the gateway's ``_meta``; raises a sanitized ``MCPError`` otherwise. ``params`` is
        the downstream request's params (its ``_meta``, and its ``input_responses`` and
        ``request_state`` when it retries a multi-round exchange); ``op`` names the operation in
        telemetry (default: the kind); ``shortcut(conn)``, when it returns a result, answers
        without asking the upstream (e.g. a source without the capability); ``raw``: the result
        may come back as a :class:`RawResult` (the fast lane)."""
        # The span (parented on the client's traceparent), the duration histogram by kind, name
        # and outcome, and the audit record: ``observe``.
        args, limited = getattr(params, "arguments", None), op is None
        with self._observer.operation(ctx, op or kind.value, name, params.meta, args) as facts:
            result = await self._forward(ctx, kind, name, params, build, result_type, shortcut, raw, limited, facts)
            facts.result = result
            return result

    async def _forward(
        self,
        ctx: ServerRequestContext[Any],
        kind: EntryKind,
        name: str,
        params: Any,
        build: RequestBuilder,
        result_type: type[Any],
        shortcut: Callable[[UpstreamConnection], Any] | None,
        raw: bool = False,
        limited: bool = True,
        facts: OpFacts | None = None,
    ) -> Any:
        binding = self._sessions.binding(ctx)
        facts = facts or OpFacts()
        facts.session, facts.principal, facts.view = binding.session.id, binding.principal, binding.session.view
        meta: Mapping[str, Any] | None = params.meta
        responses = getattr(params, "input_responses", None)
        state = getattr(params, "request_state", None)
        sealed: Sealed | None = None
        if state is not None:
            if state.startswith(HELD_PREFIX):
                # A 2026 client's retry of a held exchange: the exchange holds its own pin.
                exchange_revision: int | None = None
                try:
                    result, exchange = await self._exchanges.resume(binding, ctx, kind, name, state, responses)
                    exchange_revision = facts.revision = exchange.revision
                except Exception as exc:
                    raise self._client_error(exc, None, exchange_revision) from None
                return self._finish(result, exchange.revision, exchange.drifted)
            if not state.startswith(SEALED_PREFIX):
                raise invalid_state()  # the gateway hands out no other request_state
            sealed = self._seal.open(binding.session.id, state)
        live = choose_generation(
            self._catalog, ctx, binding.session, meta, prefer=sealed.revision if sealed is not None else None
        )
        conn: Any = None
        facts.revision = live.revision
        approved: Pin | None = None  # the approved call's pin on ``live`` (released at the end)
        try:
            resolved = self._authority.resolve(binding.session, live.generation, kind, name)
            entry = facts.entry = resolved.entry
            facts.drifted = resolved.drifted
            if sealed is not None and sealed.source != entry.source:
                raise invalid_state()
            state_ = live.generation.source_state(entry.source)
            conn = state_.connection if state_ is not None else None
            if not isinstance(conn, UpstreamConnection) or not conn.alive:
                raise UpstreamUnavailable()  # fail fast: never an operation on a closed connection (I4)
            if kind is EntryKind.TOOL:  # parks until approved, if it needs an approval (I22)
                args = getattr(params, "arguments", None)  # an approval names their digest
                approved = await self.approvals.clear(binding, ctx, live, entry, name, args, conn)
            answer = shortcut(conn) if shortcut is not None else None
            if answer is not None:
                return self._finish(answer, live.revision, resolved.drifted)
            # Limits (ADR 0033; not completions): tokens now, the source's concurrency slot below.
            slot = await self._limiter.admit(binding.session, entry) if limited else NO_SLOT
            up_meta = inject(forwardable(meta))  # the gateway's span is the upstream's parent
            if not conn.legacy:
                level = self._logs.call_level(binding, meta)
                if level is not None:  # 2026-era upstreams send records only to requests that opt in
                    up_meta = {**(up_meta or {}), LOG_LEVEL_META: level}
            extra: dict[str, Any] = {}
            if responses is not None:
                extra["input_responses"] = responses
            if sealed is not None and sealed.upstream_state is not None:
                extra["request_state"] = sealed.upstream_state
            request = build(entry, up_meta, extra)
            headers = entry.call_headers(getattr(params, "arguments", None))  # Mcp-Param-* (2026 wire)
            call_s = call_timeout(conn)
            interactive = INTERACTIVE.get(result_type)
            if interactive is not None and binding.era == "modern" and conn.legacy:
                # The upstream may send real requests mid-call; a 2026 client can only take them
                # as an InputRequiredResult, so the call runs as a held exchange (pinned while it waits for a slot).
                with live.pin():
                    async with slot:
                        result = await self._exchanges.start(
                            binding,
                            ctx,
                            conn,
                            live,
                            request,
                            result_type,
                            kind=kind,
                            name=name,
                            drifted=resolved.drifted,
                            timeout_s=call_s,
                        )
            else:
                rtype = interactive if interactive is not None and not conn.legacy else result_type
                # The slot inside the operation: a queued call is pinned and bounded by its deadlines.
                async with live.operation(deadline_s=self._catalog.operation_deadline_s), slot:
                    with self._relay.call(binding, ctx, conn) as call:
                        sent = anyio.current_time()
                        try:
                            result = await self._send(conn, request, rtype, ctx, meta, call_s, raw, headers)
                        finally:  # the upstream's share, also when it failed
                            facts.upstream_s = anyio.current_time() - sent
                        if isinstance(result, types.InputRequiredResult):
                            retry = self._retrier(conn, entry, build, up_meta, rtype, ctx, meta, call_s, headers)
                            result = await answer_input_required(
                                self._relay,
                                self._seal,
                                binding,
                                ctx,
                                call,
                                conn,
                                entry.source,
                                live.revision,
                                result,
                                retry,
                            )
                        await call.settle()
        except Exception as exc:
            raise self._client_error(exc, conn, live.revision) from None
        finally:
            if approved is not None:
                approved.release()
        if not isinstance(result, RawResult):  # a raw result has no URI (simple_call_result)
            result = rewrite_result(result, conn.spec.uri_prefix)  # exposed URIs in links and contents
        return self._finish(result, live.revision, resolved.drifted)

    async def _send(
        self,
        conn: UpstreamConnection,
        request: Any,
        result_type: Any,
        ctx: ServerRequestContext[Any],
        meta: Mapping[str, Any] | None,
        call_s: float | None,
        raw: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        if progress_token(meta) is None:
            answer = await conn.send_raw(request, timeout_s=call_s, param_headers=headers)
            if raw and simple_call_result(answer):
                return RawResult(answer)
            return conn.check(request.method, answer, result_type)
        return await send_with_progress(conn, request, result_type, ctx, call_s, headers)

    def _retrier(
        self,
        conn: UpstreamConnection,
        entry: CatalogEntry,
        build: RequestBuilder,
        up_meta: Any,
        rtype: Any,
        ctx: ServerRequestContext[Any],
        meta: Mapping[str, Any] | None,
        call_s: float | None,
        headers: Mapping[str, str],
    ) -> Retry:
        """Sends the upstream request again with a round's answers and the upstream's state."""

        async def retry(answers: types.InputResponses | None, upstream_state: str | None) -> Any:
            extra: dict[str, Any] = {}
            if answers is not None:
                extra["input_responses"] = answers
            if upstream_state is not None:
                extra["request_state"] = upstream_state
            return await self._send(conn, build(entry, up_meta, extra), rtype, ctx, meta, call_s, headers=headers)

        return retry

    def _client_error(self, exc: BaseException, conn: Any, revision: int | None) -> MCPError:
        """The sanitized downstream-facing error for ``exc`` (I12)."""
        if isinstance(exc, RelayError):
            return exc  # the gateway's own words, or the downstream client's own answer
        if isinstance(exc, MCPError):
            if exc.error.code == types.REQUEST_TIMEOUT:
                # The source's own call timeout (``timeouts.call_s``) ran out; the SDK already
                # cancelled the upstream request.
                return to_mcp_error(OperationDeadlineError(call_timeout(conn) or 0.0), revision=revision)
            if connection_lost(exc, conn):
                # The SDK's own "Connection closed", not upstream text: the upstream died under the call.
                log.info("upstream %s: connection lost during a call", getattr(conn, "source", "?"))
                return to_mcp_error(UpstreamUnavailable(), revision=revision)
            return to_mcp_error(exc, revision=revision)
        return to_mcp_error(exc, revision=revision)

    @staticmethod
    def _finish(result: Any, revision: int, drifted: bool) -> Any:
        out_meta = {k: v for k, v in (result.meta or {}).items() if not k.startswith(_SPEC_META_PREFIX)}
        out_meta[REVISION_META] = revision
        if drifted:
            out_meta[DRIFT_META] = True
        if isinstance(result, RawResult):
            return RawResult({**result.data, "_meta": out_meta})
        return result.model_copy(update={"meta": out_meta})


def call_timeout(conn: Any) -> float | None:
    """The source's per-call timeout (``timeouts.call_s`` in its config), if any."""
    timeouts = conn.spec.transport.get("timeouts") if isinstance(conn, UpstreamConnection) else None
    value = timeouts.get("call_s") if timeouts else None
    return float(value) if value is not None else None


def connection_lost(exc: MCPError, conn: Any) -> bool:
    """Whether ``exc`` reports the upstream connection ending rather than an upstream answer."""
    if isinstance(conn, UpstreamConnection) and not conn.alive:
        return True
    return (
        exc.error.code == types.CONNECTION_CLOSED
        and exc.error.message == "Connection closed"
        and exc.error.data is None
    )


def forwardable(meta: Mapping[str, Any] | None) -> Any:
    """Request ``_meta`` safe to pass upstream: no progress token (the upstream session mints
    its own; forwarding the downstream's would route the upstream's progress to whichever
    request on the shared upstream connection has that id), no protocol keys, no gateway keys."""
    if not meta:
        return None
    out = {
        k: v
        for k, v in dict(meta).items()
        if k not in PROGRESS_KEYS and not k.startswith(_SPEC_META_PREFIX) and not k.startswith("io.mcp-reconciler/")
    }
    return out or None
