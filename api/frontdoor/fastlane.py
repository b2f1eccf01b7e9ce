"""The fast lane: the two hot requests — ``*/list`` and ``tools/call`` — served without the SDK
rebuilding what the gateway does not read (issue 12, ADR 0019).

Both are *server middleware*: the SDK still owns sessions, SSE, the handshake, the request's
task (so cancellation cancels it), progress and the relay's back-channel; the lane only skips
the per-request model work inside the pipeline — surface validation of params, the handler's
result model, ``model_dump`` and the per-version sieve (``runner._serialize``). A middleware that
returns without ``call_next`` owns the wire dict it returns (SDK contract), so each lane returns
exactly the dict the normal lane would have produced, and declines (``call_next``) whenever it
cannot be sure of that. ``tests/integration/test_fastlane.py`` runs the same expectations
against both lanes.

**Lists.** A list page is a pure function of (method, protocol version, revision, the session's
grant set, drift policy, whether the control tools are shown, in search mode the found set and
the always-visible names, cursor). The first request for a
key runs the normal lane and its wire dict is kept; later ones — the same session or any session
with an equal grant set — are answered from it. The grant set is identified by a digest computed
once per ``Session.grants`` object (replaced, never mutated: ``reconciler/authority.py``). Both
maps are bounded LRUs. Races: none — one event loop, and every input that could change the page
is in the key (a publication is a new revision; a grant change is a new grants object).

**Garbage collection.** A full (generation-2) collection walks every tracked object; with a
large catalog and a thousand sessions that is a pause of tens to hundreds of milliseconds,
landing on whichever request allocates next. :func:`freeze_after_publication` collects the young
generations and moves what survives — the published catalog, its parsed definitions, the open
sessions — into the permanent generation, so later full collections walk only what was allocated
since. It runs when a generation is published (not per request), at most once per
:data:`FREEZE_INTERVAL_S`. Cost: a reference cycle that is frozen and becomes garbage later is
not reclaimed by the collector (refcounting still frees everything acyclic, which is nearly all
of it); the leak is bounded by what was alive at publications.

**Calls.** :class:`CallLane` takes a plain ``tools/call`` (name, arguments, ``_meta``; no task,
not a built-in or task-only tool; a 2026 client's retry of a *sealed* multi-round call — its
``inputResponses`` validated, its ``requestState`` opened by the same operation — but not the
retry of a held exchange) after the SDK's own params check, and
runs it through the same :class:`~mcp_reconciler.api.frontdoor.forwarding.Forwarder` operation
as the normal lane — binding, generation, grant, pin, relay registration, sanitized errors — but
with the typed params and the result model skipped: when the upstream answered on the fast
upstream lane (``reconciler/fasthttp.py``) with a simple result (text content, structured
content, the error flag, ``_meta``), that JSON gets the gateway's ``_meta`` and the SDK's 2026
stamp and goes out as is. Any other result is the model the normal lane makes, shaped for the
wire by the SDK's own ``_serialize`` (``sdk_compat.serialize_result``). Cancellation and
progress are unchanged: the lane runs inside the SDK's request task, with its context."""

from __future__ import annotations

import gc
import hashlib
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp_types import methods as _methods
from pydantic import TypeAdapter, ValidationError

from mcp_reconciler.api import sdk_compat
from mcp_reconciler.api.frontdoor.cache import LRU
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.forwarding import Forwarder
from mcp_reconciler.api.frontdoor.passthrough import RawResult
from mcp_reconciler.api.frontdoor.revisions import choose_generation
from mcp_reconciler.api.frontdoor.rounds import SEALED_PREFIX
from mcp_reconciler.api.frontdoor.sessions import Binding, Sessions
from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.authority import Authority

CallNext = Callable[[Any], Awaitable[Any]]

#: Kill switch (and the benchmark's "before" run): ``MCP_RECONCILER_FAST_LANE=0`` serves every
#: request through the normal lane and leaves the collector alone.
FAST_LANE_ENV = "MCP_RECONCILER_FAST_LANE"


def fast_lane_enabled() -> bool:
    """Whether the fast lane is on (default) — off only when :data:`FAST_LANE_ENV` is ``0``."""
    return os.environ.get(FAST_LANE_ENV, "1").strip() != "0"


#: Wire pages kept: one per (method, era, revision, grant set, cursor). A page of 1,000 tools is
#: about 1 MB of dicts; the bound keeps the cache under ~64 MB in the worst case.
PAGE_CACHE_ENTRIES = 64
#: Grant-set digests kept, one per live ``Session.grants`` object (a strong reference each, so
#: an ``id`` in the key is never reused while cached).
GRANT_DIGESTS = 8192

LIST_METHODS = frozenset({"tools/list", "resources/list", "resources/templates/list", "prompts/list"})

_page_hits = telemetry.meter.create_counter(
    "frontdoor.fastlane.list_pages", description="List pages served, by source (cache or built)"
)


class ListCache:
    """Server middleware answering ``*/list`` from cached wire pages (contract in the module
    docstring). ``show_extra(binding)`` says whether the caller sees the built-in control tools
    (part of the key)."""

    def __init__(
        self,
        catalog: CatalogAccess,
        authority: Authority,
        sessions: Sessions,
        *,
        show_extra: Callable[[Binding], bool] = lambda binding: False,
        capacity: int = PAGE_CACHE_ENTRIES,
    ) -> None:
        self._catalog = catalog
        self._authority = authority
        self._sessions = sessions
        self._show_extra = show_extra
        self.pages: LRU[tuple[Any, ...], dict[str, Any]] = LRU(capacity)
        self._digests: LRU[int, tuple[Mapping[str, str], str]] = LRU(GRANT_DIGESTS)
        self.enabled = True

    def grant_digest(self, grants: Mapping[str, str]) -> str:
        """A digest of the grant set ``grants`` (keys and the definition digests granted),
        computed once per grants object."""
        hit = self._digests.get(id(grants))
        if hit is not None and hit[0] is grants:
            return hit[1]
        h = hashlib.sha256()
        for key, digest in sorted(grants.items()):
            h.update(f"{key}\0{digest}\n".encode())
        value = h.hexdigest()
        self._digests.put(id(grants), (grants, value))
        return value

    async def __call__(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> Any:
        """Serve ``ctx`` from the cache if it is a list request the cache can answer exactly."""
        if not self.enabled or ctx.method not in LIST_METHODS:
            return await call_next(ctx)
        key = self._key(ctx)
        if key is None:
            return await call_next(ctx)
        cached = self.pages.get(key)
        if cached is not None:
            _page_hits.add(1, {"method": ctx.method, "from": "cache"})
            return dict(cached)  # the pipeline owns the top level it is handed; nested parts are never written
        result = await call_next(ctx)
        if isinstance(result, dict):
            self.pages.put(key, dict(result))
            _page_hits.add(1, {"method": ctx.method, "from": "built"})
        return result

    def _key(self, ctx: ServerRequestContext[Any]) -> tuple[Any, ...] | None:
        """The cache key of ``ctx``, or ``None`` when only the normal lane can answer it exactly
        (malformed params, a connection not initialized yet, an unbound caller)."""
        params: Any = ctx.params if ctx.params is not None else {}  # raw JSON: anything
        if not isinstance(params, Mapping):
            return None
        cursor = params.get("cursor")
        meta = params.get("_meta")
        if (cursor is not None and not isinstance(cursor, str)) or (meta is not None and not isinstance(meta, dict)):
            return None
        if set(params) - {"cursor", "_meta"}:
            return None  # fields the per-version surface judges: leave them to it
        try:
            if not sdk_compat.connection_of(ctx).initialize_accepted:
                return None
            binding = self._sessions.binding(ctx)
            live = choose_generation(self._catalog, ctx, binding.session, meta)
        except Exception:
            return None  # the normal lane raises the same error, sanitized, through its own path
        return (
            ctx.method,
            str(ctx.protocol_version),
            live.revision,
            self._authority.drift_policy,
            self.grant_digest(binding.session.grants),
            binding.session.view,  # equal grant keys name other entries in another view
            # Search mode (ADR 0029) lists only pinned + found tools: both are in the key.
            (binding.session.found, self._authority.discovery.always_visible)
            if self._authority.searching(binding.session)
            else None,
            self._show_extra(binding),
            cursor,
        )


#: Publications closer together than this share one freeze (a reload storm must not turn into
#: a collection storm).
FREEZE_INTERVAL_S = 1.0
_last_freeze = [-FREEZE_INTERVAL_S]


def freeze_after_publication() -> None:
    """Collect the young generations, then freeze the survivors (see "Garbage collection" in the
    module docstring); at most once per :data:`FREEZE_INTERVAL_S`. Call it right after a
    publication, never on the request path."""
    now = time.monotonic()
    if now - _last_freeze[0] < FREEZE_INTERVAL_S:
        return
    _last_freeze[0] = now
    gc.collect(1)
    gc.freeze()


_CALL_KEYS = frozenset({"name", "arguments", "_meta", "inputResponses", "requestState"})
_INPUT_RESPONSES: TypeAdapter[Any] = TypeAdapter(types.InputResponses)
_MODERN = "2026"


class CallLane:
    """Server middleware: plain ``tools/call`` requests through
    :meth:`Forwarder.call_tool_fast` (contract in the module docstring). ``takes(name)`` says
    whether a tool name may use the lane at all (not a built-in control tool, not a tool that
    requires a task); ``server`` is the SDK server whose wire form results take."""

    def __init__(self, forwarder: Forwarder, server: Any, *, takes: Callable[[str], bool]) -> None:
        self._forwarder = forwarder
        self._server = server
        self._takes = takes
        self.enabled = True
        self.served = 0  # calls the lane answered (tests read it to know which lane ran)

    async def __call__(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> Any:
        """Serve ``ctx`` on the lane if it is a plain ``tools/call``; else pass it on."""
        if not self.enabled or ctx.method != "tools/call":
            return await call_next(ctx)
        params: Any = ctx.params  # raw JSON: anything
        if not isinstance(params, Mapping) or not _CALL_KEYS.issuperset(params):
            return await call_next(ctx)
        name, arguments, meta = params.get("name"), params.get("arguments"), params.get("_meta")
        state = params.get("requestState")
        if (
            not (state is None or (isinstance(state, str) and state.startswith(SEALED_PREFIX)))
            or not isinstance(name, str)
            or not (arguments is None or isinstance(arguments, dict))
            or not (meta is None or isinstance(meta, dict))
            or not self._takes(name)
            or self._server.cache_hints.get("tools/call") is not None
        ):
            return await call_next(ctx)
        version = str(ctx.protocol_version)
        try:
            # The SDK's own surface check of the params (what ``call_next`` would run first).
            _methods.validate_client_request("tools/call", version, params)
            if not sdk_compat.connection_of(ctx).initialize_accepted:
                return await call_next(ctx)
            responses = params.get("inputResponses")
            if responses is not None:
                responses = _INPUT_RESPONSES.validate_python(responses)
        except (KeyError, ValidationError):
            return await call_next(ctx)  # the normal lane answers it, with the SDK's own error
        result = await self._forwarder.call_tool_fast(
            ctx, name, arguments, meta, input_responses=responses, request_state=state
        )
        self.served += 1
        if isinstance(result, RawResult):
            wire = {k: v for k, v in result.data.items() if k != "resultType"}
            wire.setdefault("isError", False)  # the model's default, always on the wire
            if version.startswith(_MODERN):
                wire["resultType"] = "complete"
            return sdk_compat.stamp_server_info(self._server, version, wire)
        return sdk_compat.serialize_result(self._server, "tools/call", version, result)
