"""Notifications: telling each session that its view changed (I9, ADR 0006).

After every publication (and on :meth:`Notifier.touch`, when grants change outside one) the
notifier compares each unpinned binding's view of the current generation with the view it was
last told about; the kinds that differ become *pending* and are delivered as ``list_changed``,
coalesced per binding (many publications, one notification per kind while it waits). A
publication that does not change a session's view sends it nothing. A pinned session's view
does not follow publications, so it is never told.

Delivery depends on the era. Legacy: a push on the binding's connection — over HTTP it rides
the client's standalone GET stream, and a push made before that stream is open would be
dropped by the SDK, so it is *held* (pending) and retried every :data:`RETRY_S` until the
stream opens or the session goes. The HTTP layer answers "is it open?" through the narrow
:class:`PushGate` it hands the front door; without one (stdio, in-memory) the connection
itself carries pushes. New era: an event on the binding's own listen streams
(``api/frontdoor/listen.py``, which hands frames to each stream's writer directly); a binding
that never listened has nowhere to be told and its pending kinds are dropped (its first listen
starts from a fresh list anyway).

The loop is one task owned by the server's task group (:meth:`Notifier.run`); it sleeps on an
event, not a poll, unless something is held."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Protocol

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ServerEvent,
    ToolsListChanged,
)

from mcp_reconciler.api.frontdoor import link
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.listen import ListenStreams
from mcp_reconciler.api.frontdoor.sessions import Binding
from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.authority import Authority, Session, View
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import EntryKind

log = logging.getLogger("mcp_reconciler.frontdoor")

RETRY_S = 0.1  # held legacy pushes are retried this often while any is pending


class PushGate(Protocol):
    """What the front door asks the HTTP layer before a legacy push (the only direction: the
    HTTP layer implements this, the front door never sees the session manager)."""

    def standalone_stream_open(self, http_session_id: str) -> bool | None:
        """Whether the HTTP session's GET stream is open now; ``None`` once the session is gone."""
        ...


class Notifier:
    """Delivers per-binding ``list_changed`` as described in the module docstring. Guarantees: a
    binding is told at most once per kind per pass, only about kinds whose view changed since it
    was last told, and never after its session is gone."""

    def __init__(self, catalog: CatalogAccess, authority: Authority, bindings: Mapping[str, Binding]) -> None:
        self._catalog = catalog
        self._authority = authority
        self._bindings = bindings
        self._gate: PushGate | None = None
        self._buses: dict[str, ListenStreams] = {}
        self._wake = anyio.Event()
        #: What identifies a grant set in the per-pass view memo: the object (the default) or,
        #: set by the front door, the page cache's content digest (equal sets share one view).
        self.grant_key: Callable[[Mapping[str, str]], Hashable] = id
        # Subscribed now, not when the loop starts: a publication in between still wakes it.
        self._unsubscribe = catalog.on_publish(self.touch)

    def gate_pushes(self, gate: PushGate) -> None:
        """Hold legacy HTTP pushes until ``gate`` says the session's GET stream is open. Called
        once, by the HTTP layer, before the server serves its first request."""
        if self._gate is not None:
            raise RuntimeError("the push gate is already set")
        self._gate = gate

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The notifier loop; run it in the owner's task group for the server's lifetime."""
        task_status.started()
        try:
            while True:
                with anyio.move_on_after(RETRY_S if self.any_pending() else float("inf")):
                    await self._wake.wait()
                if self._wake.is_set():  # a publication or a grant change: views may differ
                    self._wake = anyio.Event()
                    await self._notify_all()
                else:  # the retry tick: views are as last evaluated, only held kinds are owed
                    await self._retry_held()
        finally:
            self._unsubscribe()

    def touch(self) -> None:
        """Re-evaluate every binding's view on the loop's next pass."""
        self._wake.set()

    def any_pending(self) -> bool:
        """Whether any binding has a change it has not been told about yet."""
        return any(b.pending for b in self._bindings.values())

    def can_push(self, binding: Binding) -> bool:
        """Whether a legacy push can reach ``binding`` now (its GET stream is open, or its
        transport carries pushes itself). A binding whose HTTP session is gone loses its pending
        kinds: there is no one left to tell."""
        if binding.http_session_id is None or self._gate is None:
            return True  # stdio / in-memory: the connection itself carries pushes
        open_ = self._gate.standalone_stream_open(binding.http_session_id)
        if open_ is None:
            binding.pending = set()  # the session is gone
            return False
        return open_

    def drop(self, key: str) -> None:
        """Close the listen stream and bus of a binding that was removed."""
        bus = self._buses.pop(key, None)
        if bus is not None:
            bus.close()

    async def publish(self, key: str, event: ServerEvent) -> bool:
        """Publish ``event`` on the listen bus of the new-era binding ``key`` (each of its open
        streams delivers it if its filter admits it); ``False`` when it never listened."""
        bus = self._buses.get(key)
        if bus is None:
            return False
        bus.publish(event)
        return True

    async def listen(
        self, binding: Binding, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """Serve a new-era ``subscriptions/listen`` for ``binding`` on its own bus, so one
        identity's changes never reach another's stream."""
        bus = self._buses.get(binding.key)
        if bus is None:
            bus = self._buses[binding.key] = ListenStreams()
        return await bus.serve(ctx, params)

    async def tell_session(self, session: Session, generation: Generation) -> None:
        """Re-evaluate every binding of ``session`` against ``generation`` now and deliver what
        changed (``find_tools`` made tools visible: the client is told before the answer). What
        cannot be delivered yet stays pending for the loop."""
        for binding in list(self._bindings.values()):
            if binding.session is not session:
                continue
            view = self._authority.view(session, generation)
            binding.pending |= view.changed_kinds(binding.last_view)
            binding.last_view = view
            if binding.pending:
                await self._deliver(binding)
        if self.any_pending():
            self.touch()

    async def _notify_all(self) -> None:
        live = self._catalog.current()
        if live is None:
            return
        # One view per distinct set of inputs per pass, not per binding: a view walks every grant
        # of the session (a thousand sessions seeing a thousand tools were a million steps per
        # publication, ADR 0038); sessions with equal grants, view and search state share it.
        views: dict[Hashable, View] = {}
        changes: dict[tuple[int, int], tuple[View, View | None, frozenset[EntryKind]]] = {}
        # Sessions made the same way share one grant map (reconciler/sharing.py): its key (a
        # content digest) is worked out once per map per pass. Kept alive by the sessions.
        grant_keys: dict[int, Hashable] = {}
        searching: dict[tuple[Hashable, Hashable], bool] = {}  # by (session's mode, view): once per pass
        told = Told(live.generation.published_at)
        for binding in list(self._bindings.values()):
            session = binding.session
            if session.pinned_revision is not None:
                continue  # a pinned session's view does not follow publications
            grant_key = grant_keys.get(id(session.grants))
            if grant_key is None:
                grant_key = grant_keys[id(session.grants)] = self.grant_key(session.grants)
            mode = (session.discovery, session.view)
            search = searching.get(mode)
            if search is None:
                search = searching[mode] = self._authority.searching(session)
            key = (
                grant_key,
                session.view,
                (frozenset(session.found), self._authority.discovery.always_visible) if search else None,
            )
            view = views.get(key)
            if view is None:
                view = views[key] = self._authority.view(session, live.generation)
            last = binding.last_view
            if last is not view:  # the same object: nothing changed (shared views share this too)
                pair = (id(view), id(last))  # kept alive by the entry, so an id is never reused
                memo = changes.get(pair)
                if memo is None:
                    memo = changes[pair] = (view, last, frozenset(view.changed_kinds(last)))
                binding.pending |= memo[2]
                binding.last_view = view
            if binding.pending:
                started = time.perf_counter()
                if await self._deliver(binding):
                    told.one(binding.era, started)
        told.record()

    async def _retry_held(self) -> None:
        """Deliver what bindings still hold (a legacy push waiting for its GET stream), without
        re-evaluating any view: views change only on a publication or a grant change, each of
        which wakes :meth:`_notify_all`. (Re-evaluating every binding on every tick while one
        waited cost a full pass over all sessions ten times a second, ADR 0038.)"""
        live = self._catalog.current()
        if live is None:
            return
        told = Told(live.generation.published_at)
        for binding in list(self._bindings.values()):
            if binding.pending and binding.session.pinned_revision is None:
                started = time.perf_counter()
                if await self._deliver(binding):
                    told.one(binding.era, started)
        told.record()

    async def _deliver(self, binding: Binding) -> bool:
        """Tell ``binding`` what changed; whether it was told (else it stays pending)."""
        kinds = binding.pending
        if binding.era == "legacy":
            if binding.conn is None or not self.can_push(binding):
                return False  # held until the client's GET stream is open; retried on the next tick
            try:
                await link.push_list_changed(binding.conn, kinds)
            except Exception:
                log.info("session %s: list_changed push failed", binding.session.id)
                return False
        else:
            bus = self._buses.get(binding.key)
            if bus is None:
                # No listen stream yet: the next listen starts from a fresh list anyway. Drop the
                # pending kinds, or the notifier would re-poll this binding every tick forever.
                binding.pending = set()
                return False
            if EntryKind.TOOL in kinds:
                bus.publish(ToolsListChanged())
            if kinds & {EntryKind.RESOURCE, EntryKind.RESOURCE_TEMPLATE}:
                bus.publish(ResourcesListChanged())
            if EntryKind.PROMPT in kinds:
                bus.publish(PromptsListChanged())
        binding.notifications += 1
        binding.pending = set()
        return True


class Told:
    """One notifier pass's deliveries, for telemetry: each session's list_changed lag (from the
    publication to it being told), the notifications by era, and the pass's write spread (from
    the start of the first delivery to the end of the last: the fan-out itself, ADR 0038; one
    delivery to a 2026 binding writes to all its listen streams). Counters are added once
    per pass, not per session (a thousand ``add`` calls were ~5 % of a fan-out's CPU), and each
    session's lag is taken when it is told but recorded after the pass's last write (a histogram
    ``record`` per session was ~8 % of the pass, paid before the next session's write)."""

    __slots__ = ("_by_era", "_first", "_lags", "_last", "_published_at")

    def __init__(self, published_at: float) -> None:
        self._published_at = published_at
        self._by_era: dict[str, int] = {}
        self._lags: list[float] = []
        self._first = self._last = 0.0

    def one(self, era: str, started: float) -> None:
        """A session of ``era`` was just told (its delivery began at ``started``, perf_counter)."""
        now = time.perf_counter()
        if not self._by_era:
            self._first = started
        self._last = now
        self._by_era[era] = self._by_era.get(era, 0) + 1
        self._lags.append(time.time() - self._published_at)

    def record(self) -> None:
        """The pass is over: its lags, counts and write spread."""
        record_lag = telemetry.list_changed_lag.record
        for lag in self._lags:
            record_lag(max(lag, 0.0))
        for era, n in self._by_era.items():
            telemetry.notifications_sent.add(n, {"era": era})
        if self._by_era:
            telemetry.list_changed_fanout.record(self._last - self._first)
