"""List pages served from cached wire dicts (issue 12, ADR 0019), and the collector frozen after
each publication.

**Lists.** A list page is a pure function of (method, protocol version, revision, the session's
grant set, drift policy, whether the control tools are shown, in search mode the found set and
the always-visible names, cursor). The first request for a key builds the page and its wire dict
is kept; later ones — the same session or any session with an equal grant set — are answered
from it. The grant set is identified by a digest computed once per ``Session.grants`` object
(replaced, never mutated: ``reconciler/authority.py``). Both maps are bounded LRUs. Races: none —
one event loop, and every input that could change the page is in the key (a publication is a new
revision; a grant change is a new grants object).

**Garbage collection.** A full (generation-2) collection walks every tracked object; with a
large catalog and a thousand sessions that is a pause of tens to hundreds of milliseconds,
landing on whichever request allocates next. :func:`freeze_after_publication` collects the young
generations and moves what survives — the published catalog, its parsed definitions, the open
sessions — into the permanent generation, so later full collections walk only what was allocated
since. It runs when a generation is published (not per request), at most once per
:data:`FREEZE_INTERVAL_S`. Cost: a reference cycle that is frozen and becomes garbage later is
not reclaimed by the collector (refcounting still frees everything acyclic, which is nearly all
of it); the leak is bounded by what was alive at publications."""

from __future__ import annotations

import gc
import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp.server import ServerRequestContext

from mcp_reconciler.api.frontdoor.cache import LRU
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.revisions import choose_generation
from mcp_reconciler.api.frontdoor.sessions import Binding, Sessions
from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.authority import Authority

CallNext = Callable[[Any], Awaitable[Any]]

#: Wire pages kept: one per (method, era, revision, grant set, cursor). A page of 1,000 tools is
#: about 1 MB of dicts; the bound keeps the cache under ~64 MB in the worst case.
PAGE_CACHE_ENTRIES = 64
#: Grant-set digests kept, one per live ``Session.grants`` object (a strong reference each, so
#: an ``id`` in the key is never reused while cached).
GRANT_DIGESTS = 8192

LIST_METHODS = frozenset({"tools/list", "resources/list", "resources/templates/list", "prompts/list"})

#: List pages served, by method and source (cache or built): a hot-path tally read at collection
#: (an SDK ``Counter.add`` per list was 10-25 us, a few per cent of a cached 1,000-tool list's
#: gateway CPU; issue 26, ADR 0038 "Call CPU").
_pages_served = telemetry.Tally("frontdoor.list_pages", "List pages served, by source (cache or built)")


class ListCache:
    """``*/list`` answered from cached wire pages (contract in the module docstring); called as
    ``cache(ctx, build)`` by the dispatcher (the SDK server's middleware signature).
    ``show_extra(binding)`` says whether the caller sees the built-in control tools (part of the
    key)."""

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
        #: Off: every page is built (the oracle tests compare both ways).
        self.enabled = True
        self.pages: LRU[tuple[Any, ...], dict[str, Any]] = LRU(capacity)
        self._digests: LRU[int, tuple[Mapping[str, str], str]] = LRU(GRANT_DIGESTS)

    def grant_digest(self, grants: Mapping[str, str]) -> str:
        """A digest of the grant set ``grants`` (keys and the definition digests granted),
        computed once per grants object."""
        hit = self._digests.get(id(grants))
        if hit is not None and hit[0] is grants:
            return hit[1]
        # One join and one update (the same bytes, so the same digest, as an update per grant:
        # ~20 % less on a session's first list of 1,000 grants, issue 26).
        value = hashlib.sha256(
            "".join([f"{key}\0{digest}\n" for key, digest in sorted(grants.items())]).encode()
        ).hexdigest()
        self._digests.put(id(grants), (grants, value))
        return value

    async def __call__(self, ctx: ServerRequestContext[Any], call_next: CallNext) -> Any:
        """Serve ``ctx`` from the cache if it is a list request the cache can answer exactly."""
        if ctx.method not in LIST_METHODS or not self.enabled:
            return await call_next(ctx)
        key = self._key(ctx)
        if key is None:
            return await call_next(ctx)
        cached = self.pages.get(key)
        if cached is not None:
            _pages_served.add({"method": ctx.method, "from": "cache"})
            return cached  # shared: nothing after the dispatcher writes a result (its bytes go out as kept)
        result = await call_next(ctx)
        if isinstance(result, dict):
            self.pages.put(key, result)
            _pages_served.add({"method": ctx.method, "from": "built"})
        return result

    def _key(self, ctx: ServerRequestContext[Any]) -> tuple[Any, ...] | None:
        """The cache key of ``ctx``, or ``None`` when only a built page answers it exactly
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
        try:  # an uninitialized 2025-era connection never gets here (the era's handler refuses it)
            binding = self._sessions.binding(ctx)
            live = choose_generation(self._catalog, ctx, binding.session, meta)
        except Exception:
            return None  # building the page raises the same error, sanitized, through its own path
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
