"""The runtime set: the current generation plus the superseded ones still draining (I4, I5).

Guarantees:
- Publishing is one reference swap (synchronous, no await), so readers see either the old or
  the new generation, never a mix, and never an empty window.
- A superseded generation closes when its pins reach zero, or at its drain deadline
  (operation deadline + grace), when operations still running are cancelled with a retryable
  error naming the revision. At most ``retiring_max`` superseded generations stay open; if the
  set is full, the publication is deferred and retried exactly once when a slot frees.
- Connections are reference-counted across the current, retiring and pending generations; a
  connection closes exactly once, when the last generation referencing it has closed (I14).
"""

from __future__ import annotations

import enum
import logging
import time
import weakref
from collections.abc import Callable, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

import anyio
from anyio.abc import TaskGroup

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.catalog import Catalog
from mcp_reconciler.reconciler.errors import ReconcilerClosedError, RevisionUnavailableError
from mcp_reconciler.reconciler.events import Retired, Trigger
from mcp_reconciler.reconciler.generation import Generation, content_digest
from mcp_reconciler.reconciler.model import Connection
from mcp_reconciler.reconciler.pins import Operation, Pin
from mcp_reconciler.reconciler.tasks import background_tasks

log = logging.getLogger("mcp_reconciler.runtime")

CONNECTION_CLOSE_TIMEOUT_S = 10.0


class LiveState(enum.Enum):
    """Where a live generation is in its life: CURRENT, then RETIRING once superseded, then CLOSED
    (final; a closed generation can no longer be pinned)."""

    CURRENT = "current"
    RETIRING = "retiring"
    CLOSED = "closed"


class LiveGeneration:
    """A published generation plus its runtime bookkeeping (pins, operations, state).

    The ``generation`` itself is immutable (I1); only the counters here change."""

    __slots__ = (
        "__weakref__",
        "_closed_event",
        "_content_digest",
        "_idle_waiter",
        "_operations",
        "_pins",
        "_runtime",
        "_state",
        "drain_deadline",
        "forced_with",
        "generation",
        "hold_until",
        "revision",
        "superseded_at",
    )

    def __init__(self, runtime: Runtime, generation: Generation) -> None:
        self.generation = generation
        self.revision = generation.revision
        self._runtime = runtime
        self._content_digest: str | None = None
        self._pins = 0
        self._state = LiveState.CURRENT
        self._operations: set[Operation] = set()
        self._closed_event = anyio.Event()
        self._idle_waiter: anyio.Event | None = None
        self.drain_deadline: float | None = None  # anyio clock
        self.hold_until: float = float("-inf")  # anyio clock: revision holds extend the drain deadline
        self.superseded_at: float | None = None  # wall clock
        self.forced_with: tuple[int, int] | None = None  # (pins, operations) when its deadline forced it

    @property
    def content_digest(self) -> str:
        """The replica-independent digest of this generation's catalog (computed once, on first
        use: only pinned requests that name a digest ask for it)."""
        if self._content_digest is None:
            self._content_digest = content_digest(self.generation.catalog)
        return self._content_digest

    @property
    def pins(self) -> int:
        """Pins held right now; a retiring generation closes when this reaches zero (I4)."""
        return self._pins

    @property
    def state(self) -> LiveState:
        """The lifecycle state; changes only CURRENT -> RETIRING -> CLOSED."""
        return self._state

    @property
    def is_closed(self) -> bool:
        """True once the generation closed: :meth:`pin` then raises RevisionUnavailableError."""
        return self._state is LiveState.CLOSED

    @property
    def operations(self) -> int:
        """The number of operations running on this generation now."""
        return len(self._operations)

    def pin(self) -> Pin:
        """Take a pin (O(1), no I/O). Raises RevisionUnavailableError once the generation closed (I4)."""
        if self._state is LiveState.CLOSED:
            raise RevisionUnavailableError(self.revision, self._runtime.current_revision)
        self._pins += 1
        self._runtime.pins_total += 1  # a plain int on the hot path; exported by an observable counter
        return Pin(self)

    def operation(self, deadline_s: float | None = None) -> Operation:
        """An async context manager that pins this generation for one operation."""
        return Operation(self, deadline_s)

    async def wait_operations_done(self) -> None:
        """Return once no operation runs on this generation (callers bound the wait)."""
        while self._operations:
            if self._idle_waiter is None:
                self._idle_waiter = anyio.Event()  # shared by every waiter until it fires
            await self._idle_waiter.wait()

    def _operation_done(self, op: Operation) -> None:
        self._operations.discard(op)
        if not self._operations and self._idle_waiter is not None:
            self._idle_waiter.set()
            self._idle_waiter = None

    def _unpin(self) -> None:
        self._pins -= 1
        if self._pins == 0 and self._state is LiveState.RETIRING:
            self._runtime._on_drained(self)

    def _mark_closed(self) -> None:
        self._state = LiveState.CLOSED
        self._closed_event.set()

    def __repr__(self) -> str:
        return f"<LiveGeneration rev={self.revision} {self._state.value} pins={self._pins}>"


@dataclass(frozen=True, slots=True)
class PublishResult:
    """What ``Runtime.publish`` did with a candidate."""

    status: Literal["published", "unchanged", "deferred"]
    revision: int | None  # the revision now current (new one when published)


Listener = Callable[[Generation, Generation | None], None]
RetireListener = Callable[[Retired], None]


class Runtime:
    """Owns live generations and the connections they reference.

    Use as ``async with Runtime(bounds) as runtime:``; leaving the block (or ``aclose``) tears
    everything down exactly once (I14)."""

    def __init__(self, bounds: Bounds | None = None, *, wall_clock: Callable[[], float] = time.time) -> None:
        self.bounds = bounds or Bounds()
        self._wall = wall_clock
        self._current: LiveGeneration | None = None
        self._retiring: list[LiveGeneration] = []
        self._by_revision: dict[int, LiveGeneration] = {}
        self._pending: Catalog | None = None
        self._pending_revision: int | None = None
        self._pending_trigger = Trigger()
        self._retire_listeners: list[RetireListener] = []
        # Retirements that happen inside a publication (a superseded generation with no pins
        # closes at once) are told after the publication listeners: publish, then retire.
        self._installing = False
        self._retired_backlog: list[Retired] = []
        self._next_revision = 1
        self._refs: dict[int, int] = {}
        self._conns: dict[int, Connection] = {}
        self._closed_conns: weakref.WeakSet[Connection] = weakref.WeakSet()
        self._listeners: list[Listener] = []
        self._tg: TaskGroup | None = None
        self._closing = False
        self._closed = anyio.Event()
        self._tg_active = False
        self._closes_in_flight = 0
        self._closes_idle = anyio.Event()
        self._closes_idle.set()
        self._exit = AsyncExitStack()
        self.forced_drains = 0
        self.pins_total = 0  # cumulative; exported by the owner's pin gauges (telemetry.pin_gauges)
        self.deferred_publications = 0
        self.connections_closed = 0

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Runtime:
        async with AsyncExitStack() as stack:
            self._tg = await stack.enter_async_context(background_tasks())
            self._tg_active = True
            stack.push_async_callback(self._teardown)  # runs first on exit, then the tasks are reaped
            self._exit = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._exit.__aexit__(exc_type, exc, tb)

    async def _teardown(self) -> None:
        try:
            with anyio.CancelScope(shield=True):
                await self.aclose()
        finally:
            self._tg_active = False  # no background close may start from here on

    async def aclose(self) -> None:
        """Tear down exactly once; concurrent and repeated calls wait for the same teardown.

        Running operations are cancelled with a retryable error, given ``drain_grace_s`` to
        unwind, then every connection still referenced is closed exactly once."""
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        try:
            lives = self.live()
            for live in lives:
                for op in list(live._operations):
                    op._force_cancel(closing=True)
            with anyio.move_on_after(self.bounds.drain_grace_s):
                for live in lives:
                    await live.wait_operations_done()
            conns: list[Connection] = []
            for live in lives:
                if live.is_closed:
                    continue  # drained during the grace wait: its references are already released
                live._mark_closed()
                conns.extend(self._release_refs(live.generation.catalog))
            if self._pending is not None:
                conns.extend(self._release_refs(self._pending))
                self._pending = None
            self._current = None
            self._retiring.clear()
            self._by_revision.clear()
            for conn in conns:
                await self._close_connection(conn)
            # Closes started earlier in the background (superseded generations, orphans) must
            # finish before teardown reports done (I14); each is bounded by its own timeout.
            await self._closes_idle.wait()
        finally:
            self._closed.set()

    @property
    def closed(self) -> bool:
        """True from the moment teardown starts (``aclose`` called), not only once it finished."""
        return self._closing

    # -- reading -----------------------------------------------------------------------------

    @property
    def current(self) -> LiveGeneration | None:
        """The generation new requests pin, or None before the first publication and after teardown."""
        return self._current

    @property
    def current_revision(self) -> int | None:
        """The current generation's revision, or None when nothing is published."""
        return self._current.revision if self._current is not None else None

    @property
    def retiring(self) -> tuple[LiveGeneration, ...]:
        """A snapshot of the superseded generations still draining, oldest first (at most ``retiring_max``)."""
        return tuple(self._retiring)

    @property
    def pending(self) -> Catalog | None:
        """The candidate deferred because the retiring set was full (I5), or None; it is retried once when
        a slot frees."""
        return self._pending

    def live(self) -> list[LiveGeneration]:
        """Current first, then retiring from newest to oldest."""
        out = [self._current] if self._current is not None else []
        out.extend(reversed(self._retiring))
        return out

    def get(self, revision: int) -> LiveGeneration:
        """The live generation with ``revision``; RevisionUnavailableError if it is not live."""
        live = self._by_revision.get(revision)
        if live is None or live.state is LiveState.CLOSED:
            raise RevisionUnavailableError(revision, self.current_revision)
        return live

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(new, previous)`` synchronously after each publication; returns a remover."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def add_retire_listener(self, listener: RetireListener) -> Callable[[], None]:
        """Call ``listener(retired)`` synchronously when a superseded generation closes (drained,
        closed at once with no pins, or forced at its drain deadline); returns a remover. Not
        called at teardown. A listener that raises is logged."""
        self._retire_listeners.append(listener)
        return lambda: self._retire_listeners.remove(listener) if listener in self._retire_listeners else None

    def connection_refs(self) -> dict[int, int]:
        """A snapshot: ``id(connection)`` -> how many live or pending generations reference it (I14)."""
        return dict(self._refs)

    def close_unreferenced(self, conns: Iterable[Connection]) -> None:
        """Close, in the background, each of ``conns`` that no generation references — e.g. the
        connections a failed cycle opened before it failed. Referenced connections are left to
        their generations. Each close happens at most once, is bounded by
        ``CONNECTION_CLOSE_TIMEOUT_S``, and teardown (``aclose``) waits for it (I14).

        Raises ReconcilerClosedError once the runtime's task group is gone; the caller then
        still owns the connections."""
        self._close_later([c for c in conns if id(c) not in self._refs])

    # -- publishing --------------------------------------------------------------------------

    @property
    def last_assigned_revision(self) -> int:
        """The highest revision number this runtime ever published (0: none)."""
        return self._next_revision - 1

    def publish(
        self, catalog: Catalog, *, revision: int | None = None, trigger: Trigger | None = None
    ) -> PublishResult:
        """Publish ``catalog`` as the next revision, discard it if equal to the current one (I3),
        or defer it if the retiring set is full (I5). Synchronous: one reference swap.
        ``revision``: the number the cluster's ledger gave this content; used when it is above
        every number published here (revisions only grow), else the next local one.
        ``trigger`` (why it was built) is recorded on the generation; a deferred candidate
        replaced by a newer one passes its trigger on to it."""
        trigger = trigger or Trigger()
        if self._closing:
            if self._tg_active:
                self._close_orphans(catalog)
            # Otherwise the runtime's task group is gone: the caller still owns the candidate's
            # connections and must close them.
            raise ReconcilerClosedError()
        self._ref(catalog)
        if self._pending is not None:
            previous_pending, self._pending = self._pending, None
            trigger = self._pending_trigger.merged(trigger)
            self._pending_trigger = Trigger()
            self._close_later(self._release_refs(previous_pending))
        return self._install(catalog, trigger, revision)

    def _install(self, catalog: Catalog, trigger: Trigger, assigned: int | None = None) -> PublishResult:
        """``catalog``'s connections are already referenced by the caller."""
        cur = self._current
        if cur is not None and catalog.digest == cur.generation.digest:
            telemetry.candidates_discarded.add(1)
            self._close_later(self._release_refs(catalog))
            return PublishResult("unchanged", cur.revision)
        if cur is not None and cur.pins > 0 and len(self._retiring) >= self.bounds.retiring_max:
            self._pending = catalog
            self._pending_revision = assigned
            self._pending_trigger = trigger
            self.deferred_publications += 1
            telemetry.publications_deferred.add(1)
            log.info(
                "publication deferred: %d generations retiring (max %d)",
                len(self._retiring),
                self.bounds.retiring_max,
            )
            return PublishResult("deferred", cur.revision)
        revision = assigned if assigned is not None and assigned >= self._next_revision else self._next_revision
        self._next_revision = revision + 1
        generation = Generation(revision=revision, catalog=catalog, published_at=self._wall(), trigger=trigger)
        live = LiveGeneration(self, generation)
        self._by_revision[revision] = live
        self._current = live
        self._installing = True
        try:
            if cur is not None:
                self._supersede(cur)
        finally:
            self._installing = False
        # by reason: the trigger's reasons (a small fixed set: list_changed, config, watched_file, ...)
        reasons = "+".join(trigger.reasons) if trigger is not None and trigger.reasons else "unknown"
        telemetry.publishes.add(1, {"reason": reasons})
        log.info("published revision %d (%d entries)", revision, catalog.entry_count)
        previous = cur.generation if cur is not None else None
        for listener in list(self._listeners):
            try:
                listener(generation, previous)
            except Exception:  # a listener must not break publication
                log.exception("publication listener failed")
        backlog, self._retired_backlog = self._retired_backlog, []
        for retired in backlog:
            self._tell_retired(retired)
        return PublishResult("published", revision)

    def _supersede(self, live: LiveGeneration) -> None:
        live.superseded_at = self._wall()
        if live.pins == 0:
            self._close_generation(live)
            return
        live._state = LiveState.RETIRING
        live.drain_deadline = anyio.current_time() + self.bounds.drain_deadline_s
        self._retiring.append(live)
        assert self._tg is not None, "Runtime must be entered (async with) before publishing"
        self._tg.start_soon(self._retire, live)

    async def _retire(self, live: LiveGeneration) -> None:
        """Wait for the generation to drain, or force it at its deadline (I5)."""
        assert live.drain_deadline is not None
        while True:
            # A revision hold (bounded TTL) may extend the deadline while we wait; work started
            # under a hold still gets the drain grace after it expires.
            deadline = max(live.drain_deadline, live.hold_until + self.bounds.drain_grace_s)
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                await live._closed_event.wait()
            now = anyio.current_time()
            if (
                live.is_closed
                or self._closing
                or now >= max(live.drain_deadline, live.hold_until + self.bounds.drain_grace_s)
            ):
                break
        if not live.is_closed and not self._closing:
            self.forced_drains += 1
            telemetry.forced_drains.add(1)
            log.warning(
                "revision %d reached its drain deadline with %d pins; cancelling %d operations",
                live.revision,
                live.pins,
                len(live._operations),
            )
            live.forced_with = (live.pins, len(live._operations))
            for op in list(live._operations):
                op._force_cancel()
            with anyio.move_on_after(self.bounds.drain_grace_s):
                await live.wait_operations_done()
            if not live.is_closed:
                self._close_generation(live)

    def _on_drained(self, live: LiveGeneration) -> None:
        """Last pin of a retiring generation released: close it now (synchronously, so no new
        pin can be taken), free its slot, and retry a deferred publication once."""
        if live.state is LiveState.RETIRING:
            self._close_generation(live)

    def _close_generation(self, live: LiveGeneration) -> None:
        was_retiring = live in self._retiring
        live._mark_closed()
        if was_retiring:
            self._retiring.remove(live)
        self._by_revision.pop(live.revision, None)
        self._close_later(self._release_refs(live.generation.catalog))
        if not self._closing and live.superseded_at is not None:
            forced = live.forced_with
            retired = Retired(
                revision=live.revision,
                published_at=live.generation.published_at,
                superseded_at=live.superseded_at,
                closed_at=self._wall(),
                forced=forced is not None,
                pins_left=forced[0] if forced is not None else 0,
                operations_cancelled=forced[1] if forced is not None else 0,
            )
            if self._installing:
                self._retired_backlog.append(retired)
            else:
                self._tell_retired(retired)
        if was_retiring and self._pending is not None and not self._closing:
            pending, self._pending = self._pending, None
            assigned, self._pending_revision = self._pending_revision, None
            trigger, self._pending_trigger = self._pending_trigger, Trigger()
            self._install(pending, trigger, assigned)  # the one retry; refs were taken when it was deferred

    def _tell_retired(self, retired: Retired) -> None:
        for listener in list(self._retire_listeners):
            try:
                listener(retired)
            except Exception:  # a listener must not break retirement
                log.exception("retirement listener failed")

    # -- connection reference counting ---------------------------------------------------------

    def _ref(self, catalog: Catalog) -> None:
        for conn in catalog.connections():
            key = id(conn)
            self._refs[key] = self._refs.get(key, 0) + 1
            self._conns[key] = conn

    def _release_refs(self, catalog: Catalog) -> list[Connection]:
        """Drop one reference per connection; return the ones nobody references any more."""
        orphans: list[Connection] = []
        for conn in catalog.connections():
            key = id(conn)
            n = self._refs.get(key, 0) - 1
            if n <= 0:
                self._refs.pop(key, None)
                self._conns.pop(key, None)
                orphans.append(conn)
            else:
                self._refs[key] = n
        return orphans

    def _close_orphans(self, catalog: Catalog) -> None:
        self.close_unreferenced(catalog.connections())

    def _close_later(self, conns: Iterable[Connection]) -> None:
        for conn in conns:
            if self._tg is None or not self._tg_active:
                raise ReconcilerClosedError()
            self._closes_in_flight += 1
            self._closes_idle = anyio.Event() if self._closes_idle.is_set() else self._closes_idle
            self._tg.start_soon(self._close_tracked, conn)

    async def _close_tracked(self, conn: Connection) -> None:
        try:
            await self._close_connection(conn)
        finally:
            self._closes_in_flight -= 1
            if self._closes_in_flight == 0:
                self._closes_idle.set()

    async def _close_connection(self, conn: Connection) -> None:
        if conn in self._closed_conns:
            return
        self._closed_conns.add(conn)
        self.connections_closed += 1
        with anyio.CancelScope(shield=True), anyio.move_on_after(CONNECTION_CLOSE_TIMEOUT_S) as scope:
            try:
                await conn.aclose()
            except Exception:
                log.exception("closing connection %s failed", conn.connection_id)
        if scope.cancelled_caught:
            log.warning("closing connection %s timed out", conn.connection_id)
