"""Resource subscriptions: per-session subscription sets over shared upstream subscriptions.

A downstream subscribes to an *exposed* URI — one of its view (a granted resource, or a URI a
granted template matches; I9: anything else is unknown). The URI resolves to a key
``(source, upstream URI)`` (``reconciler/uris.py``), and the key is referenced in
:class:`~mcp_reconciler.reconciler.subscriptions.UpstreamSubscriptions`, which holds exactly one
upstream subscription per key however many sessions want it, and keeps it on the source's current
connection across reconnects and publications.

Holders, per era:

- 2025-11-25: ``resources/subscribe`` / ``resources/unsubscribe`` on the binding's connection.
  The answer comes once the upstream holds the key (an update right after ``{}`` is delivered),
  or is the upstream's refusal. Subscribing twice is one subscription; unsubscribing what was
  never subscribed answers ``{}``. The set ends with the connection.
- 2026-07-28: the ``resource_subscriptions`` of a ``subscriptions/listen`` request. The URIs the
  session cannot see, or that no upstream takes, are left out of the acknowledged filter (the
  client sees what it got); the set lives exactly as long as the stream.

Updates come back as ``notifications/resources/updated`` with the exposed URI, to every holder of
the key and no one else, through the per-binding outboxes of ``updates`` (pushed on a legacy
connection once its GET stream is open, or published on the binding's listen bus).

A subscription ends when its URI leaves the session's view: after every publication and grant
change each one is resolved again — gone or ungranted drops it (and its reference), moved to
another source re-keys it. Bounds: at most ``per_session`` subscriptions per session (legacy:
``too_many_subscriptions``; a listen request over the bound is refused before it is
acknowledged)."""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext

from mcp_reconciler.api.errors import to_mcp_error
from mcp_reconciler.api.frontdoor import link
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.notify import Notifier
from mcp_reconciler.api.frontdoor.sessions import Binding, Sessions
from mcp_reconciler.api.frontdoor.updates import UpdateDelivery
from mcp_reconciler.reconciler.authority import Authority
from mcp_reconciler.reconciler.errors import UpstreamUnavailableError
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import EntryKind
from mcp_reconciler.reconciler.subscriptions import Key, UpstreamSubscriptions, can_subscribe
from mcp_reconciler.reconciler.upstream import UpstreamConnection
from mcp_reconciler.reconciler.uris import upstream_uri

log = logging.getLogger("mcp_reconciler.frontdoor")

SUBSCRIPTIONS_PER_SESSION = 256

_ids = itertools.count(1)


@dataclass(eq=False)
class _Holder:
    """One subscription set: a legacy binding's, or one listen stream's. ``uris`` maps each
    exposed URI to its key."""

    id: str
    binding: Binding
    uris: dict[str, Key] = field(default_factory=dict)


def unsupported() -> MCPError:
    """The answer for a resource whose server offers no subscriptions."""
    return MCPError(
        types.METHOD_NOT_FOUND,
        "this resource's server does not offer subscriptions",
        {"code": "subscribe_unsupported", "retryable": False},
    )


class ResourceSubscriptions:
    """The subscription handlers of the front door (contract in the module docstring). Run
    :meth:`run` in the front door's task group for the server's lifetime."""

    def __init__(
        self,
        catalog: CatalogAccess,
        authority: Authority,
        sessions: Sessions,
        notifier: Notifier,
        *,
        per_session: int = SUBSCRIPTIONS_PER_SESSION,
    ) -> None:
        self._catalog = catalog
        self._authority = authority
        self._sessions = sessions
        self._notifier = notifier
        self.per_session = per_session
        self.upstream = UpstreamSubscriptions(self._live_connection, self._on_update)
        self._holders: dict[str, _Holder] = {}
        self._by_key: dict[Key, dict[str, str]] = {}  # key → holder id → exposed URI
        self._counts: dict[str, int] = {}  # session id → subscriptions
        self.delivery = UpdateDelivery(notifier, sessions)
        self._revalidate = anyio.Event()
        self._unsubscribe_publish = catalog.on_publish(self.touch)

    # -- capability ----------------------------------------------------------------------------

    def supported(self) -> bool:
        """Advertised as ``resources.subscribe``: some source of the current generation offers
        subscriptions (a resource of a source that does not answers ``subscribe_unsupported``)."""
        live = self._catalog.current()
        if live is None:
            return False
        return any(
            isinstance(s.connection, UpstreamConnection) and can_subscribe(s.connection)
            for s in live.generation.sources
        )

    def count(self, session_id: str) -> int:
        """How many subscriptions the session holds (both eras, every binding)."""
        return self._counts.get(session_id, 0)

    # -- 2025-11-25 handlers ----------------------------------------------------------------------

    async def subscribe(
        self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        """``resources/subscribe``: answered once the upstream holds the subscription."""
        binding = self._sessions.binding(ctx)
        holder = self._legacy_holder(binding)
        uri = str(params.uri)
        key = self._key(binding, uri)
        if holder.uris.get(uri) == key:
            return types.EmptyResult()  # already subscribed: one subscription
        if uri not in holder.uris:
            self._check_bound(binding, 1)
        self._add(holder, uri, key)
        try:
            await self.upstream.wait_held(key)
        except BaseException as exc:
            self._remove(holder, uri)
            if isinstance(exc, Exception):
                raise to_mcp_error(exc) from None
            raise
        return types.EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        """``resources/unsubscribe``: ``{}`` whether or not the URI was subscribed."""
        binding = self._sessions.binding(ctx)
        holder = self._holders.get(f"legacy:{binding.key}")
        if holder is not None:
            self._remove(holder, str(params.uri))
        return types.EmptyResult()

    def _legacy_holder(self, binding: Binding) -> _Holder:
        hid = f"legacy:{binding.key}"
        holder = self._holders.get(hid)
        if holder is None:
            holder = self._holders[hid] = _Holder(hid, binding)
            if binding.conn is not None:
                link.on_connection_close(binding.conn, self._drop, hid)
        return holder

    # -- 2026-07-28 listen streams -------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def listening(
        self, binding: Binding, params: types.SubscriptionsListenRequestParams
    ) -> AsyncIterator[types.SubscriptionsListenRequestParams]:
        """Hold the listen request's resource subscriptions for the stream's lifetime; yields the
        params with only the URIs that are held (what the acknowledgment will name)."""
        wanted = list(dict.fromkeys(params.notifications.resource_subscriptions or ()))
        if not wanted:
            yield params
            return
        self._check_bound(binding, len(wanted))
        holder = _Holder(f"listen:{next(_ids)}", binding)
        self._holders[holder.id] = holder
        try:
            for uri in wanted:
                with contextlib.suppress(MCPError):
                    self._add(holder, uri, self._key(binding, uri))
            with contextlib.suppress(TimeoutError):
                async with anyio.create_task_group() as tg:
                    for uri, key in list(holder.uris.items()):
                        tg.start_soon(self._held_or_dropped, holder, uri, key)
            honored = [uri for uri in wanted if uri in holder.uris]
            notifications = params.notifications.model_copy(update={"resource_subscriptions": honored or None})
            yield params.model_copy(update={"notifications": notifications})
        finally:
            self._drop(holder.id)

    async def _held_or_dropped(self, holder: _Holder, uri: str, key: Key) -> None:
        try:
            await self.upstream.wait_held(key)
        except Exception:
            self._remove(holder, uri)

    # -- shared ----------------------------------------------------------------------------------

    def _key(self, binding: Binding, uri: str) -> Key:
        """The key an exposed URI of the caller's view resolves to; raises the client's error."""
        live = self._catalog.current()
        if live is None:
            raise MCPError(
                -32015, "no catalog is published yet; retry shortly", {"code": "starting", "retryable": True}
            )
        key = self._resolve(binding, live.generation, uri)
        conn = self._live_connection(key[0])
        if conn is None:
            raise to_mcp_error(UpstreamUnavailableError(f"source {key[0]} has no live connection"))
        if not can_subscribe(conn):
            raise unsupported()
        return key

    def _resolve(self, binding: Binding, generation: Generation, uri: str) -> Key:
        try:
            entry = self._authority.resolve(binding.session, generation, EntryKind.RESOURCE, uri).entry
            return entry.source, upstream_uri(entry, uri)
        except Exception as exc:
            raise to_mcp_error(exc, revision=generation.revision) from None

    def _check_bound(self, binding: Binding, more: int) -> None:
        held = self.count(binding.session.id)
        if held + more > self.per_session:
            raise MCPError(
                types.INVALID_PARAMS,
                f"a session may hold at most {self.per_session} resource subscriptions",
                {"code": "too_many_subscriptions", "retryable": False, "held": held},
            )

    def _add(self, holder: _Holder, uri: str, key: Key) -> None:
        if uri in holder.uris:
            self._remove(holder, uri)
        holder.uris[uri] = key
        self._by_key.setdefault(key, {})[holder.id] = uri
        sid = holder.binding.session.id
        self._counts[sid] = self._counts.get(sid, 0) + 1
        self.upstream.acquire(key)

    def _remove(self, holder: _Holder, uri: str) -> None:
        key = holder.uris.pop(uri, None)
        if key is None:
            return
        by_holder = self._by_key.get(key)
        if by_holder is not None:
            by_holder.pop(holder.id, None)
            if not by_holder:
                del self._by_key[key]
        sid = holder.binding.session.id
        n = self._counts.get(sid, 0) - 1
        if n > 0:
            self._counts[sid] = n
        else:
            self._counts.pop(sid, None)
        self.upstream.release(key)

    def _drop(self, holder_id: str) -> None:
        holder = self._holders.pop(holder_id, None)
        if holder is None:
            return
        for uri in list(holder.uris):
            self._remove(holder, uri)
        if not any(h.binding is holder.binding for h in self._holders.values()):
            self.delivery.close(holder.binding.key)

    def forget(self, binding_key: str) -> None:
        """Drop every subscription of a binding that was removed."""
        for hid in [hid for hid, h in self._holders.items() if h.binding.key == binding_key]:
            self._drop(hid)

    def touch(self) -> None:
        """Resolve every subscription again on the next pass (a publication, a grant change)."""
        self._revalidate.set()
        self.upstream.touch()

    def _live_connection(self, source: str) -> UpstreamConnection | None:
        live = self._catalog.current()
        state = live.generation.source_state(source) if live is not None else None
        conn = state.connection if state is not None else None
        return conn if isinstance(conn, UpstreamConnection) and conn.alive else None

    # -- the loop: views and delivery -------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The upstream loop, view checks after publications and grant changes, and delivery."""
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self.upstream.run)
                await tg.start(self.delivery.run)
                task_status.started()
                while True:
                    await self._revalidate.wait()
                    self._revalidate = anyio.Event()
                    self._check_views()
        finally:
            self._unsubscribe_publish()

    def _check_views(self) -> None:
        live = self._catalog.current()
        if live is None:
            return
        for holder in list(self._holders.values()):
            if self._sessions.bindings.get(holder.binding.key) is not holder.binding:
                self._drop(holder.id)  # the session or its connection is gone
                continue
            for uri, key in list(holder.uris.items()):
                try:
                    now = self._resolve(holder.binding, live.generation, uri)
                except MCPError:
                    self._remove(holder, uri)  # left the session's view: the subscription ends
                    continue
                if now != key:
                    self._add(holder, uri, now)  # served by another source now: follow it

    def _on_update(self, source: str, uri: str) -> None:
        for hid, exposed in list(self._by_key.get((source, uri), {}).items()):
            holder = self._holders.get(hid)
            if holder is not None:
                self.delivery.enqueue(holder.binding, exposed)
