"""The engine facade: the one narrow surface the edges (control API, CLI commands, front door,
demo) use — refresh, status, readiness, the current and live generations, publication
listeners, the bounds, sessions, revision holds and approvals. Edges never reach through it into the
reconciler, its queue or its runtime.

Wiring flows one way, at construction. A composition root (:func:`open_engine` here, ``Gateway``
for a config file) creates the trigger queue first, hands ``queue.add`` to everything that marks
sources dirty (the upstream reader, the input watcher) and the queue to the ``Reconciler`` that
consumes it, then builds the :class:`Engine` over the reconciler. The same way, it creates the
:class:`~reconciler.peer.PeerSwitch` first and gives it to the reader (every connection hands
it what its server starts) and to the engine, where an edge attaches the peer that answers. Everything is entered on one
``AsyncExitStack`` and leaves it in reverse order, exactly once (I14).

The engine's own background tasks — the input watcher, per-source polling (``poll_seconds``)
and revision-hold expiry — run while the engine is entered and stop before the reconciler
closes. Input checks (I11): every refresh and status answer first runs a stat sweep over the
watched inputs, so no answer predates a change on disk.

Many replicas (ADR 0020): given :class:`~mcp_reconciler.reconciler.cluster.ClusterOptions`, the
engine runs a :class:`~mcp_reconciler.reconciler.cluster.sync.ClusterSync` while entered: control-
API sessions are shared, holds are checked and honoured cluster-wide, readiness needs the store
confirmed within its staleness bound, and a revision the ledger knows but this replica does not
serve is a retryable ``revision_unavailable``. Without it nothing of that exists."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType

import anyio

from mcp_reconciler.reconciler.approvals import ApprovalRegistry
from mcp_reconciler.reconciler.authority import Authority, DriftPolicy, Session
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.cluster import ClusterOptions
from mcp_reconciler.reconciler.cluster.sync import ClusterStatus, ClusterSync, RefreshAll
from mcp_reconciler.reconciler.desired import DesiredState, DesiredStateSource
from mcp_reconciler.reconciler.errors import RevisionNotHereError, RevisionUnavailableError
from mcp_reconciler.reconciler.events import EventLog, Published, SessionChanged, SourceChanged
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.health import SourceHealth
from mcp_reconciler.reconciler.holds import HoldInfo, HoldRegistry
from mcp_reconciler.reconciler.idle import run_idle_expiry
from mcp_reconciler.reconciler.limiter import Limiter
from mcp_reconciler.reconciler.peer import PeerSwitch, UpstreamPeer
from mcp_reconciler.reconciler.reconcile import CycleOutcome, Reconciler, new_trigger_queue
from mcp_reconciler.reconciler.runtime import Listener, LiveGeneration, LiveState
from mcp_reconciler.reconciler.status import EngineStatus, ReconnectSchedule, build_status
from mcp_reconciler.reconciler.tasks import background_tasks
from mcp_reconciler.reconciler.upstream import TargetFactory, UpstreamReader, default_targets
from mcp_reconciler.reconciler.workqueue import ALL, CONFIG, Ticket

log = logging.getLogger("mcp_reconciler.engine")

#: A stat sweep over watched inputs: the dirty keys (source names, ``"config"``) that changed
#: since the last load. ``ConfigDesiredState.poll`` is one.
InputCheck = Callable[[], Awaitable[set[str]]]


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether the engine can serve: a generation is published and the engine is not closing.
    ``reason`` names why not (``no_generation_published`` | ``closed``). ``conditions`` name
    the degraded conditions of a ready engine (``config_invalid``: an invalid edit while the last
    good config serves; ``publication_deferred``): it still serves, so it stays ready — a typo
    in one replica's config must not pull every replica out of a load balancer."""

    ready: bool
    revision: int | None
    reason: str | None = None
    conditions: tuple[str, ...] = ()


class Engine:
    """A running engine, as the edges see it.

    Built by a composition root over a :class:`Reconciler` (entered before the engine is);
    ``async with engine:`` runs its background tasks (input watcher, source polling, hold
    expiry) until the block ends. Every method is safe to call from any task; only the
    awaitable ones wait, and each wait is bounded (refresh by its timeout, input checks by one
    stat sweep)."""

    def __init__(
        self,
        reconciler: Reconciler,
        *,
        reconnects: ReconnectSchedule | None = None,
        inputs: InputCheck | None = None,
        drift_policy: DriftPolicy = DriftPolicy.FLAG,
        watch_interval_s: float | None = 1.0,
        peer: PeerSwitch | None = None,
        cluster: ClusterOptions | None = None,
    ) -> None:
        self._rec = reconciler
        self._peer = peer or PeerSwitch()
        self._runtime = reconciler.runtime
        self._trigger = reconciler.queue.add
        self._reconnects = reconnects
        self._inputs = inputs
        self._watch_interval_s = watch_interval_s
        self._sessions = Authority(reconciler.bounds, drift_policy=drift_policy)
        self._holds = HoldRegistry(reconciler.runtime)
        # Approvals (ADR 0034): calls parked until answered; a deleted session's are answered at once.
        self._approvals = ApprovalRegistry()
        self._sessions.on_removed(lambda sid: self._approvals.withdraw_session(sid, "the session ended"))
        # Rate and concurrency limits (ADR 0033): buckets in the cluster store when there is one.
        self._limiter = Limiter(cluster.store if cluster is not None else None)
        self._cluster: ClusterSync | None = None
        if cluster is not None:
            self._cluster = ClusterSync(
                cluster.store,
                replica_id=cluster.replica_id,
                authority=self._sessions,
                holds=self._holds,
                runtime=reconciler.runtime,
                refresh=self.refresh,
                ledger=cluster.ledger,
                staleness_s=cluster.staleness_s,
            )
        self._exit = AsyncExitStack()
        # Standing grants (follow) are applied in the publication itself, before any reader can
        # see the new generation; config-declared sessions after every cycle (a reload that only
        # changes sessions publishes nothing).
        self._runtime.add_listener(self._sessions.follow)
        reconciler.add_desired_listener(self._declare_sessions)
        # Engine events (reconciler/events.py): every hook is synchronous, so ids follow the
        # order the engine did things in. Registered after ``follow``: a publish event is
        # emitted once standing grants are applied.
        self._events = EventLog()
        self._runtime.add_listener(self._on_published)
        self._runtime.add_retire_listener(self._events.emit)
        reconciler.health.add_listener(self._on_source)
        self._sessions.on_session(self._on_session)
        self._sessions.on_changed(lambda: self._events.emit(SessionChanged("grants")))
        self._holds.add_listener(self._events.emit)
        # Idle expiry (ADR 0032): an owner holding a revision is using its sessions.
        self._sessions.on_in_use(lambda: {h.owner for h in self._holds.list()})

    def _on_published(self, new: Generation, previous: Generation | None) -> None:
        pins, deadline_at = 0, None
        if previous is not None:
            try:
                live: LiveGeneration | None = self._runtime.get(previous.revision)
            except RevisionUnavailableError:
                live = None  # closed at once: it held no pins
            if live is not None and live.state is LiveState.RETIRING:
                pins = live.pins
                if live.drain_deadline is not None:
                    deadline = max(live.drain_deadline, live.hold_until + self.bounds.drain_grace_s)
                    deadline_at = time.time() + (deadline - anyio.current_time())
        self._events.emit(
            Published(
                revision=new.revision,
                digest=new.digest,
                built_at=new.built_at,
                published_at=new.published_at,
                entries=new.catalog.entry_count,
                trigger=new.trigger,
                previous=previous.revision if previous is not None else None,
                previous_pins=pins,
                previous_drain_deadline_at=deadline_at,
            )
        )

    def _on_source(self, new: SourceHealth, previous: SourceHealth | None) -> None:
        self._events.emit(
            SourceChanged(
                source=new.source,
                state=new.status,
                previous_state=previous.status if previous is not None else None,
                last_error=new.last_error,
                consecutive_failures=new.consecutive_failures,
            )
        )

    def _on_session(self, change: str, session: Session) -> None:
        self._events.emit(SessionChanged(change, session.id, session.owner))  # type: ignore[arg-type]

    def _declare_sessions(self, desired: DesiredState) -> None:
        live = self._runtime.current
        self._sessions.set_discovery(desired.discovery)  # before the declarations: they read it
        self._approvals.set_policy(desired.approvals)
        self._limiter.set_policy(desired.limits)
        self._sessions.declare(desired.sessions, live.generation if live is not None else None)

    async def __aenter__(self) -> Engine:
        async with AsyncExitStack() as stack:
            if self._cluster is not None:
                await stack.enter_async_context(self._cluster)
            tg = await stack.enter_async_context(background_tasks())
            # start_soon, not start: entering must not yield to the loop, or the loop's initial
            # cycle would start before a caller's first refresh and that refresh would need a second.
            tg.start_soon(self._holds.run)
            tg.start_soon(run_idle_expiry, self._sessions)
            if self._watch_interval_s is not None:
                if self._inputs is not None:
                    tg.start_soon(self._watch, self._watch_interval_s)
                tg.start_soon(self._poll_sources, min(1.0, self._watch_interval_s))
            self._exit = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._events.close()
        await self._exit.__aexit__(exc_type, exc, tb)

    # -- reading -----------------------------------------------------------------------------

    @property
    def bounds(self) -> Bounds:
        """The bounds this engine enforces (immutable)."""
        return self._rec.bounds

    @property
    def closed(self) -> bool:
        """True once teardown began: no new operation may start, no publication happens."""
        return self._runtime.closed

    @property
    def current(self) -> LiveGeneration | None:
        """The current generation (``None`` before the first publication or after teardown)."""
        return self._runtime.current

    @property
    def current_revision(self) -> int | None:
        """The current revision, or ``None``."""
        return self._runtime.current_revision

    def get(self, revision: int) -> LiveGeneration:
        """The live (current or retiring) generation ``revision``; RevisionUnavailableError if
        it is not live (its retryable ``RevisionNotHereError`` form when the cluster's ledger
        has that revision but this replica does not serve it)."""
        try:
            return self._runtime.get(revision)
        except RevisionUnavailableError as exc:
            if self._cluster is not None and self._cluster.known_revision(revision):
                raise RevisionNotHereError(revision, exc.current) from None
            raise

    def live(self) -> list[LiveGeneration]:
        """Every live generation: the current one first, then retiring ones, newest first."""
        return self._runtime.live()

    @property
    def pending_publication(self) -> bool:
        """Whether a publication is deferred because the retiring set is full (I5)."""
        return self._runtime.pending is not None

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(new, previous)`` synchronously after every publication; returns a
        remover. A listener that raises is logged and does not affect publication."""
        return self._runtime.add_listener(listener)

    def attach_peer(self, peer: UpstreamPeer) -> Callable[[], None]:
        """Make ``peer`` answer what upstream servers start — sampling, elicitation and roots
        requests, log records — on every connection this engine's reader opens; returns a
        detacher. At most one peer at a time (``RuntimeError`` otherwise). Without one, such
        requests are refused with a clear error and log records are dropped."""
        return self._peer.attach(peer)

    def source_names(self) -> frozenset[str]:
        """The sources of the desired state the newest cycle loaded."""
        desired = self._rec.last_desired
        return frozenset(s.name for s in desired.specs) if desired is not None else frozenset()

    @property
    def events(self) -> EventLog:
        """Engine events — publish, retire, source, session, hold — numbered and ordered
        (``reconciler/events.py``); subscribers are called synchronously and must not block."""
        return self._events

    @property
    def limiter(self) -> Limiter:
        """Rate and concurrency limits on forwarded calls (ADR 0033)."""
        return self._limiter

    @property
    def sessions(self) -> Authority:
        """Downstream sessions and their grants (I9, I10)."""
        return self._sessions

    @property
    def holds(self) -> HoldRegistry:
        """Revision holds (bounded, expiring pins for SDK runs); expired while the engine runs."""
        return self._holds

    # -- the cluster -------------------------------------------------------------------------

    @property
    def approvals(self) -> ApprovalRegistry:
        """Calls parked for an approval, and their requests (ADR 0034, I22)."""
        return self._approvals

    @property
    def clustered(self) -> bool:
        """Whether this engine shares sessions, holds and revisions with other replicas."""
        return self._cluster is not None

    @property
    def cluster(self) -> ClusterSync | None:
        """The cluster sync (``None``: one replica)."""
        return self._cluster

    def cluster_status(self) -> ClusterStatus | None:
        """This replica's view of the cluster, ``None`` without one."""
        return self._cluster.status() if self._cluster is not None else None

    def require_writable(self) -> None:
        """ClusterUnavailableError when shared state cannot be written (the store is not
        confirmed within its staleness bound); a no-op for one replica."""
        if self._cluster is not None:
            self._cluster.require_healthy()

    async def commit_session(self, session_id: str) -> None:
        """Return once a shared session's change (or removal) is in the cluster store; a no-op
        for one replica. Errors: see :meth:`ClusterSync.commit`."""
        if self._cluster is not None:
            await self._cluster.commit(session_id)

    async def create_hold(self, revision: int, ttl_s: float, *, owner: str, operator: bool = True) -> HoldInfo:
        """Hold ``revision`` (cluster-wide when clustered); errors as :meth:`HoldRegistry.create`."""
        if self._cluster is not None:
            return await self._cluster.create_hold(revision, ttl_s, owner=owner, operator=operator)
        return self._holds.create(revision, ttl_s, owner=owner, operator=operator)

    def get_hold(self, hold_id: str) -> HoldInfo | None:
        """A hold by id (made on any replica when clustered)."""
        if self._cluster is not None:
            return self._cluster.get_hold(hold_id)
        return self._holds.get(hold_id)

    async def release_hold(self, hold_id: str) -> HoldInfo | None:
        """Release a hold (on every replica when clustered)."""
        if self._cluster is not None:
            return await self._cluster.release_hold(hold_id)
        return self._holds.release(hold_id)

    async def refresh_replicas(self, timeout_s: float) -> RefreshAll | None:
        """Have every other live replica run a cycle that starts after this call; which did by
        ``timeout_s`` and which did not. ``None`` for one replica."""
        if self._cluster is None:
            return None
        return await self._cluster.refresh_all(timeout_s)

    def readiness(self) -> Readiness:
        """Ready iff a generation is published and the engine is not closing ("can serve");
        degraded conditions (an invalid config edit, a deferred publication) are named, not
        unready. Clustered: also not ready while the store is not confirmed within its
        staleness bound, or while shared sessions still fail closed after it came back (their
        reload from the store is pending): ``cluster_unconfirmed``."""
        revision = self._runtime.current_revision
        if self._runtime.closed:
            return Readiness(False, revision, "closed")
        if revision is None:
            return Readiness(False, None, "no_generation_published")
        if self._cluster is not None and (not self._cluster.healthy or self._sessions.unconfirmed):
            return Readiness(False, revision, "cluster_unconfirmed")
        desired = self._rec.last_desired
        conditions: list[str] = []
        if desired is not None and desired.config_error is not None:
            conditions.append("config_invalid")
        if self._runtime.pending is not None:
            conditions.append("publication_deferred")
        return Readiness(True, revision, None, tuple(conditions))

    def source_health(self) -> list[SourceHealth]:
        """Every configured source's latest health (a synchronous snapshot, for the gauges)."""
        return [self._rec.health.get(name) for name in sorted(self.source_names())]

    async def status(self) -> EngineStatus:
        """A frozen status snapshot, taken after an input check: when watched inputs changed
        since the served revision was built, it says so (``inputs_changed_since_build``) rather
        than answer as current (I11)."""
        changed = await self.check_inputs()
        holds = self._holds.list()
        held: dict[int, float] = {}
        for hold in holds:
            held[hold.revision] = max(held.get(hold.revision, 0.0), hold.expires_at)
        return build_status(
            self._rec,
            reconnects=self._reconnects,
            inputs_changed=changed,
            holds=len(holds),
            sessions=len(self._sessions.sessions()),
            held=held,
        )

    # -- acting ------------------------------------------------------------------------------

    async def check_inputs(self) -> frozenset[str]:
        """Stat sweep now; mark every changed input's key dirty and return the keys."""
        if self._inputs is None:
            return frozenset()
        keys = frozenset(await self._inputs())
        for key in keys:
            self._trigger(key, "config" if key == CONFIG else "watched_file")
        return keys

    async def submit(self, keys: Iterable[str] = (ALL,)) -> Ticket[CycleOutcome]:
        """Check inputs, mark ``keys`` dirty and return a ticket for the first cycle that starts
        afterwards (I7): ``await ticket.wait()`` for its outcome, or drop the ticket — abandoning
        it cancels nothing. ReconcilerClosedError once the engine is closing."""
        await self.check_inputs()
        return self._rec.queue.request(keys)

    async def refresh(self, keys: Iterable[str] = (ALL,), *, timeout_s: float | None = 30.0) -> CycleOutcome:
        """Check inputs, then reconcile ``keys``: the outcome of a cycle that started after this
        call (I7). TimeoutError if none finished within ``timeout_s``; giving up cancels nothing."""
        await self.check_inputs()
        return await self._rec.refresh(keys, timeout_s=timeout_s)

    def operations(self) -> int:
        """Operations running right now, over every live generation."""
        return sum(live.operations for live in self._runtime.live())

    async def settle(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for every running operation to finish (a graceful stop's
        grace period); returns how many were still running when it gave up (0: all settled).
        Starts nothing and cancels nothing; operations that start meanwhile are waited for too."""
        with anyio.move_on_after(timeout_s):
            while True:
                busy = [live for live in self._runtime.live() if live.operations]
                if not busy:
                    return 0
                for live in busy:
                    await live.wait_operations_done()
        return self.operations()

    async def aclose(self) -> None:
        """Close the engine now (idempotent, concurrent-safe): no new cycles; running operations
        end with a retryable error; every connection closes exactly once (I14). The owner's
        ``async with`` exit still reaps the tasks."""
        self._events.close()  # followers end their streams first: HTTP may then stop at once
        self._approvals.withdraw_all("the gateway is shutting down")  # parked calls are answered, not lost
        await self._rec.aclose()

    # -- background --------------------------------------------------------------------------

    async def _watch(self, interval_s: float) -> None:
        while True:
            await anyio.sleep(interval_s)
            try:
                await self.check_inputs()
            except Exception:
                log.exception("input watcher sweep failed")

    async def _poll_sources(self, tick_s: float) -> None:
        """Jittered per-source polling for sources that set ``poll_seconds``."""
        due: dict[str, float] = {}
        while True:
            await anyio.sleep(tick_s)
            desired = self._rec.last_desired
            if desired is None:
                continue
            now = anyio.current_time()
            for spec in desired.specs:
                if not spec.poll_seconds:
                    due.pop(spec.name, None)
                    continue
                nxt = due.get(spec.name)
                if nxt is None:
                    due[spec.name] = now + spec.poll_seconds * (0.8 + 0.4 * random.random())
                elif now >= nxt:
                    self._trigger(spec.name, "poll")
                    due[spec.name] = now + spec.poll_seconds * (0.8 + 0.4 * random.random())


@asynccontextmanager
async def open_engine(
    desired: DesiredStateSource,
    targets: TargetFactory = default_targets,
    *,
    bounds: Bounds | None = None,
    inputs: InputCheck | None = None,
    watch_interval_s: float | None = 1.0,
    drift_policy: DriftPolicy = DriftPolicy.FLAG,
    health_interval_s: float | None = 30.0,
    mode: str = "auto",
    listeners: Iterable[Listener] = (),
) -> AsyncIterator[Engine]:
    """Assemble and run an engine over upstream MCP connections; leaving the block closes it.

    ``desired`` says which sources to serve; ``targets`` builds what the MCP client connects to
    for each (default: stdio, HTTP or SSE from the spec; tests and embeddings return an
    in-process ``mcp.server.Server``). The loop starts with a full cycle; await
    ``engine.refresh()`` to wait for it. Upstream ``list_changed`` notifications, upstream deaths
    and changed ``inputs`` mark their sources dirty without anyone wiring anything afterwards.
    ``listeners`` are registered before the loop starts, so they see every publication."""
    bounds = bounds or Bounds()
    queue = new_trigger_queue(bounds)
    peer = PeerSwitch()  # first, like the queue: connections hand it what their servers start
    async with AsyncExitStack() as stack:
        reader = await stack.enter_async_context(
            UpstreamReader(
                targets,
                bounds=bounds,
                on_dirty=queue.add,
                health_interval_s=health_interval_s,
                mode=mode,
                peer=peer,
            )
        )
        rec = Reconciler(desired, reader, bounds=bounds, queue=queue)
        engine = Engine(
            rec,
            reconnects=reader,
            inputs=inputs,
            drift_policy=drift_policy,
            watch_interval_s=watch_interval_s,
            peer=peer,
        )
        for listener in listeners:
            engine.add_listener(listener)
        await stack.enter_async_context(rec)
        yield await stack.enter_async_context(engine)
