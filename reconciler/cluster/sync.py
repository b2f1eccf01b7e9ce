"""One replica's side of the cluster: keeps its authority cache, holds and view of the revision
ledger in step with the store, writes its own changes, heartbeats, and answers peers' refresh
requests. The hot path never waits on it: authority checks read the cache.

Tasks (one task group, owned by :class:`ClusterSync`'s ``async with``):
- **reader**: ``read_events`` from the last id seen (blocking, bounded), applying other
  replicas' events to the cache. A :class:`StreamGapError` (the id fell off the log) or a new
  store epoch (the store lost its data) flushes the cache of shared state and reloads it; after
  an epoch change this replica first writes back what it knows (its shared sessions, its holds,
  its head revision), so a restarted store without persistence loses nothing any live replica
  still knows.
- **writer**: shared-session changes the authority reported (:meth:`Authority.on_shared_change`)
  that nobody awaits (drift marks) are written in the background; control-API writes call
  :meth:`ClusterSync.commit` and answer only after the store took them. Writes of one session are
  serialized by a per-session lock, so the compare-and-set version is always the last one seen.
- **heartbeat**: a membership record with a TTL of three beats; ``refresh_all`` waits for the
  replicas whose record is live.
- **staleness monitor**: every successful store round trip renews ``last_ok``; once it is older
  than ``staleness_s``, :attr:`Authority.unconfirmed` is set (calls on shared sessions fail with
  a retryable error), :attr:`healthy` turns false (``/readyz`` 503, control-API writes 503).
  Local reconciling continues; nothing falls back to memory.

Races: an event for a session this replica is writing may arrive while the write is in flight;
versions order them (a record never replaces a newer one). Own events are skipped by origin — so
a session this replica removed never sees its own deletion event, and another replica's older
"session" event for it, read after the removal, would bring it back: removed ids are remembered
(bounded) and such events ignored."""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType, TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.authority import Authority, GrantPolicy, Session, StandingGrant
from mcp_reconciler.reconciler.cluster import StoreLedger, content_digest
from mcp_reconciler.reconciler.cluster.store import (
    ClusterStore,
    Event,
    HoldLimits,
    HoldRecord,
    SessionRecord,
    StoreUnavailableError,
    StreamGapError,
    new_hold_id,
)
from mcp_reconciler.reconciler.errors import (
    ClusterConflictError,
    ClusterUnavailableError,
    GrantError,
    HoldError,
    ReconcilerError,
    RevisionUnavailableError,
    SessionLimitError,
)
from mcp_reconciler.reconciler.generation import source_digests
from mcp_reconciler.reconciler.holds import HoldInfo, HoldRegistry
from mcp_reconciler.reconciler.runtime import Runtime
from mcp_reconciler.reconciler.tasks import background_tasks

log = logging.getLogger("mcp_reconciler.cluster")

#: Removed session ids remembered against late "session" events (ids are never reused; an event
#: older than the removal arrives within one read of the log, so this only has to outlast that).
REMOVED_REMEMBERED = 16_384


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """This replica's view of the cluster, for status answers (never a secret)."""

    replica_id: str
    store: str
    healthy: bool
    members: tuple[str, ...]
    ledger_revision: int | None
    ledger_digest: str | None
    diverged: bool
    last_error: str | None
    #: Diverged: how this replica's sources differ from a replica serving the ledger's head, one
    #: line per source (empty when no live replica reports the head's sources).
    difference: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RefreshAll:
    """Which live replicas finished a cycle for one cluster refresh (``pending``: not by the deadline)."""

    done: tuple[str, ...]
    pending: tuple[str, ...]


def to_record(session: Session) -> SessionRecord:
    """The store's form of a shared session (no token, only its hash)."""
    standing = session.standing
    return SessionRecord(
        id=session.id,
        owner=session.owner,
        token_hash=session.token_hash,
        created_at=session.created_at,
        policy=session.policy.value,
        grants=dict(session.grants),
        drift_seen=tuple(sorted(session.drift_seen)),
        standing_sources=tuple(sorted(standing.sources))
        if standing is not None and standing.sources is not None
        else None,
        standing_names=tuple(sorted(standing.names)) if standing is not None and standing.names is not None else None,
        pinned_revision=session.pinned_revision,
        control_tools=session.control_tools,
        version=session.version,
        view=session.view,
        discovery=session.discovery,
    )


def from_record(record: SessionRecord) -> Session:
    """A detached :class:`Session` carrying ``record`` (for :meth:`Authority.put_shared`)."""
    policy = GrantPolicy(record.policy)
    standing: StandingGrant | None = None
    if policy is GrantPolicy.FOLLOW or record.standing_names is not None:
        standing = StandingGrant(
            sources=frozenset(record.standing_sources) if record.standing_sources is not None else None,
            names=frozenset(record.standing_names) if record.standing_names is not None else None,
        )
    return Session(
        id=record.id,
        owner=record.owner,
        created_at=record.created_at,
        grants=MappingProxyType(dict(record.grants)),
        pinned_revision=record.pinned_revision,
        drift_seen=frozenset(record.drift_seen),
        policy=policy,
        standing=standing,
        control_tools=record.control_tools,
        view=record.view,
        discovery=record.discovery,
        shared=True,
        version=record.version,
        token_hash=record.token_hash,
    )


class ClusterSync:
    """Keeps one replica in step with a :class:`ClusterStore` (module docstring). Entered by the
    engine (``async with``); every public coroutine is bounded by the store's command timeout."""

    def __init__(
        self,
        store: ClusterStore,
        *,
        replica_id: str,
        authority: Authority,
        holds: HoldRegistry,
        runtime: Runtime,
        refresh: Callable[[], Awaitable[Any]],
        ledger: StoreLedger | None = None,
        staleness_s: float = 3.0,
        block_s: float = 1.0,
    ) -> None:
        self.store = store
        self.replica_id = replica_id
        self._authority = authority
        authority.store_confirmed = lambda: self.healthy
        self._holds = holds
        self._runtime = runtime
        self._refresh = refresh
        self.staleness_s = staleness_s
        self._block_s = min(block_s, staleness_s / 3)
        self._heartbeat_s = staleness_s / 3
        self._last = "0"
        self._epoch: str | None = None
        self._last_ok = float("-inf")
        self._reload_pending = True  # the cache reflects the store only after a (re)load
        self._last_error: str | None = None
        self._ledger = ledger or StoreLedger(store, replica_id)
        self._members: tuple[str, ...] = ()
        self._member_info: dict[str, Mapping[str, Any]] = {}
        self._hold_records: dict[str, HoldRecord] = {}
        self._pending: dict[str, bool] = {}  # session id -> removed
        # Sessions removed here or by an event: a "session" event written before the removal but
        # read after it (our own removal's event is skipped by origin) must not bring one back.
        self._removed: OrderedDict[str, None] = OrderedDict()
        self._pending_wake = anyio.Event()
        self._locks: dict[str, anyio.Lock] = {}
        self._acks: dict[str, tuple[set[str], anyio.Event]] = {}
        self._tg: TaskGroup | None = None
        self._stop_listening = authority.on_shared_change(self._on_shared_change)
        self._stop_loading = authority.on_token_miss(self._load_token)
        self._exit: Any = None
        #: Fires every time an event from another replica was applied (tests, benchmarks).
        self.applied = anyio.Event()

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> ClusterSync:
        await self.store.connect()
        try:
            await self._reload()
        except StoreUnavailableError as exc:
            # Start unready rather than fail: the reader keeps trying, and nothing is served
            # from memory for shared sessions meanwhile.
            self._failed(exc)
        cm = background_tasks()
        self._tg = await cm.__aenter__()
        self._exit = cm
        self._tg.start_soon(self._read_loop)
        self._tg.start_soon(self._write_loop)
        self._tg.start_soon(self._heartbeat_loop)
        self._tg.start_soon(self._monitor_loop)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop_listening()
        self._stop_loading()
        try:
            if self._exit is not None:
                await self._exit.__aexit__(exc_type, exc, tb)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
                with contextlib.suppress(ReconcilerError):
                    await self.store.leave(self.replica_id)
            await self.store.aclose()

    # -- health ------------------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        """Whether the store answered within the staleness bound."""
        return anyio.current_time() - self._last_ok <= self.staleness_s

    def require_healthy(self) -> None:
        """Raise ClusterUnavailableError unless :attr:`healthy` (control-API writes)."""
        if not self.healthy:
            raise ClusterUnavailableError(self._last_error or "not confirmed within the staleness bound")

    def _ok(self) -> None:
        self._last_ok = anyio.current_time()
        if self._authority.unconfirmed and not self._reload_pending:
            self._authority.unconfirmed = False
            self._last_error = None
            log.warning("cluster store %s reachable again; shared sessions confirmed", self.store.name)

    def _failed(self, exc: BaseException) -> None:
        if self._last_error is None:
            log.warning("cluster store %s: %s", self.store.name, exc)
        self._last_error = str(exc)

    def status(self) -> ClusterStatus:
        """This replica's view of the cluster (``diverged``: its catalog differs from the head)."""
        current = self._runtime.current
        head = self._ledger.head
        diverged = head is not None and current is not None and content_digest(current.generation.catalog) != head[1]
        difference: tuple[str, ...] = ()
        if diverged and head is not None and current is not None:
            difference = self._difference(source_digests(current.generation.catalog), head[1])
        return ClusterStatus(
            replica_id=self.replica_id,
            store=self.store.name,
            healthy=self.healthy,
            members=self._members,
            ledger_revision=head[0] if head is not None else None,
            ledger_digest=head[1] if head is not None else None,
            diverged=diverged,
            last_error=self._last_error,
            difference=difference,
        )

    def _difference(self, mine: Mapping[str, str], head_digest: str) -> tuple[str, ...]:
        """Per source, how ``mine`` differs from the sources a live replica serving the head
        reported in its heartbeat (bounded by the sources both sides name)."""
        for replica_id, info in sorted(self._member_info.items()):
            theirs = info.get("sources")
            if replica_id == self.replica_id or info.get("digest") != head_digest or not isinstance(theirs, dict):
                continue
            lines = []
            for source in sorted(set(mine) | set(theirs)):
                if source not in theirs:
                    lines.append(f"{source}: served here, not in the head (replica {replica_id})")
                elif source not in mine:
                    lines.append(f"{source}: in the head (replica {replica_id}), not served here")
                elif mine[source] != theirs[source]:
                    lines.append(f"{source}: its entries or status differ from the head (replica {replica_id})")
            return tuple(lines)
        return ()

    def known_revision(self, revision: int) -> bool:
        """Whether the ledger has reached ``revision`` (so some replica serves or served it)."""
        head = self._ledger.head
        return head is not None and revision <= head[0]

    # -- sessions ----------------------------------------------------------------------------

    def _on_shared_change(self, session_id: str, removed: bool) -> None:
        if removed:
            self._forget(session_id)
        self._pending[session_id] = removed or self._pending.get(session_id, False)
        self._pending_wake.set()

    def _forget(self, session_id: str) -> None:
        """Remember that ``session_id`` is gone (session ids are never reused), bounded."""
        self._removed[session_id] = None
        self._removed.move_to_end(session_id)
        while len(self._removed) > REMOVED_REMEMBERED:
            self._removed.popitem(last=False)

    def _lock(self, session_id: str) -> anyio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = anyio.Lock()
        return lock

    async def commit(self, session_id: str) -> None:
        """Write ``session_id``'s state (or its removal) to the store now and return once it is
        stored. ClusterUnavailableError, ClusterConflictError (the newer record was loaded),
        SessionLimitError / GrantError (a new session the cluster refused: removed here too)."""
        async with self._lock(session_id):
            removed = self._pending.pop(session_id, False)
            await self._write(session_id, removed)

    async def _write(self, session_id: str, removed: bool) -> None:
        session = self._authority.get(session_id)
        try:
            if removed or session is None:
                await self.store.delete_session(session_id, origin=self.replica_id)
            else:
                session.version = await self.store.put_session(
                    to_record(session),
                    expected=session.version,
                    origin=self.replica_id,
                    max_sessions=self._authority.bounds.sessions,
                )
        except StoreUnavailableError as exc:
            telemetry.cluster_write_failures.add(1, {"reason": "unavailable"})
            self._failed(exc)
            if session is not None and not removed:
                if session.version == 0:
                    # Never stored: it must not live on here alone (the caller answers 503).
                    self._authority.remove(session_id, announce=False)
                else:
                    # The store may or may not have it: forget the version, so the next record
                    # read (event or reload) replaces this unconfirmed change.
                    session.version = -1
            raise ClusterUnavailableError() from None
        except ClusterConflictError:
            telemetry.cluster_write_failures.add(1, {"reason": "conflict"})
            await self._load_session(session_id)
            raise
        except (SessionLimitError, GrantError):
            if session is not None and session.version == 0:
                self._authority.remove(session_id, announce=False)
            raise
        self._ok()
        if removed or session is None:
            self._locks.pop(session_id, None)

    async def _load_session(self, session_id: str) -> None:
        try:
            record = await self.store.get_session(session_id)
        except StoreUnavailableError as exc:
            self._failed(exc)
            return
        if record is None:
            self._forget(session_id)
            self._authority.remove(session_id, announce=False)
        else:
            self._install(record)

    async def _load_token(self, token_hash: str) -> Session | None:
        """A token this replica does not know yet: ask the store once (a session created on
        another replica whose event is still in flight). Unknown to the store: ``None``."""
        if not self.healthy:
            return None
        try:
            record = await self.store.session_for_token(token_hash)
        except StoreUnavailableError as exc:
            self._failed(exc)
            return None
        if record is None:
            return None
        self._install(record)
        return self._authority.get(record.id)

    def _install(self, record: SessionRecord) -> None:
        current = self._runtime.current
        self._authority.put_shared(from_record(record), current.generation if current is not None else None)

    async def _write_loop(self) -> None:
        while True:
            await self._pending_wake.wait()
            self._pending_wake = anyio.Event()
            for session_id in list(self._pending):
                async with self._lock(session_id):
                    if session_id not in self._pending:
                        continue  # a commit wrote it meanwhile
                    removed = self._pending.pop(session_id)
                    try:
                        await self._write(session_id, removed)
                    except ClusterUnavailableError:
                        self._pending.setdefault(session_id, removed)  # retried after the next beat
                    except ReconcilerError as exc:
                        log.info("cluster write of session %s not applied: %s", session_id, exc.code)
            if self._pending:
                await anyio.sleep(self._heartbeat_s)
                self._pending_wake.set()

    # -- holds -------------------------------------------------------------------------------

    async def create_hold(self, revision: int, ttl_s: float, *, owner: str, operator: bool) -> HoldInfo:
        """A hold every replica that has ``revision`` honours, limits checked cluster-wide
        (atomically in the store). Errors as :meth:`HoldRegistry.create`, plus
        ClusterUnavailableError."""
        holds = self._holds
        if not (0 < ttl_s <= holds.max_ttl_s):
            raise HoldError(f"ttl_s must be > 0 and at most {holds.max_ttl_s:g} seconds")
        self.require_healthy()
        self._runtime.get(revision)  # RevisionUnavailableError if not live here
        now = time.time()
        record = HoldRecord(new_hold_id(), revision, owner, now, now + ttl_s)
        # The quota as the store checks it: owners stop short of the operators' reserve (ADR 0032).
        total = holds.max_holds if operator else holds.max_holds - holds.reserve
        limits = HoldLimits(total, holds.max_per_owner, holds.max_held_revisions)
        try:
            await self.store.create_hold(record, limits=limits, origin=self.replica_id)
        except StoreUnavailableError as exc:
            self._failed(exc)
            raise ClusterUnavailableError() from None
        self._ok()
        self._hold_records[record.id] = record
        return holds.adopt(record)

    async def release_hold(self, hold_id: str) -> HoldInfo | None:
        """Release a hold everywhere; ``None`` if no replica knows it."""
        self.require_healthy()
        try:
            record = await self.store.release_hold(hold_id, origin=self.replica_id)
        except StoreUnavailableError as exc:
            self._failed(exc)
            raise ClusterUnavailableError() from None
        self._ok()
        self._hold_records.pop(hold_id, None)
        local = self._holds.release(hold_id)
        if local is not None:
            return local
        return _info(record) if record is not None else None

    def get_hold(self, hold_id: str) -> HoldInfo | None:
        """A hold any replica made (as this replica last heard of it)."""
        local = self._holds.get(hold_id)
        if local is not None:
            return local
        record = self._hold_records.get(hold_id)
        return _info(record) if record is not None and record.expires_at > time.time() else None

    def _adopt(self, record: HoldRecord) -> None:
        self._hold_records[record.id] = record
        # This replica may not have that revision (any more): then there is nothing to keep alive.
        with contextlib.suppress(RevisionUnavailableError, HoldError):
            self._holds.adopt(record)

    # -- refresh across replicas -------------------------------------------------------------

    async def refresh_all(self, timeout_s: float) -> RefreshAll:
        """Ask every other live replica to run a cycle that starts after this call and wait for
        their answers until ``timeout_s``; the ones that did not answer are ``pending``."""
        self.require_healthy()
        request = secrets.token_hex(8)
        acks: set[str] = set()
        done = anyio.Event()
        self._acks[request] = (acks, done)
        try:
            try:
                members = [m.replica_id for m in await self.store.members() if m.replica_id != self.replica_id]
                await self.store.announce("refresh", request, origin=self.replica_id)
            except StoreUnavailableError as exc:
                self._failed(exc)
                raise ClusterUnavailableError() from None
            wanted = set(members)
            with anyio.move_on_after(timeout_s):
                while not wanted <= acks:
                    await done.wait()
                    done = anyio.Event()
                    self._acks[request] = (acks, done)
            return RefreshAll(tuple(sorted(wanted & acks)), tuple(sorted(wanted - acks)))
        finally:
            self._acks.pop(request, None)

    async def _answer_refresh(self, request: str) -> None:
        try:
            outcome = await self._refresh()
            data = json.dumps({"revision": getattr(outcome, "revision", None)})
            await self.store.announce("refresh_done", request, origin=self.replica_id, data=data)
        except Exception as exc:  # a peer's request must never take this replica down
            log.info("cluster refresh request %s not answered: %s", request, type(exc).__name__)

    # -- reading -----------------------------------------------------------------------------

    async def _reload(self) -> None:
        """Load every shared record, after re-seeding a store that lost its data."""
        epoch = await self.store.epoch()
        if self._epoch is not None and epoch != self._epoch:
            log.warning(
                "cluster store %s lost its data (new epoch): writing back what this replica knows", self.store.name
            )
            await self._reseed()
        self._epoch = epoch
        last = await self.store.last_event_id()
        records = await self.store.load_sessions()
        holds = await self.store.list_holds()
        head = await self.store.ledger_head()
        if head is not None:
            self._ledger.observe(*head)
        stored = {r.id for r in records}
        for session in self._authority.sessions():
            if session.shared and session.id not in stored:
                self._authority.remove(session.id, announce=False)
        for session_record in records:
            self._install(session_record)
        live_holds = {h.id for h in holds}
        for info in self._holds.list():
            if info.id in self._hold_records and info.id not in live_holds:
                self._holds.release(info.id)
        self._hold_records = {}
        for record in holds:
            self._adopt(record)
        self._last = last
        telemetry.cluster_reloads.add(1)
        self._reload_pending = False
        self._ok()

    async def _reseed(self) -> None:
        for session in self._authority.sessions():
            if not session.shared:
                continue
            with contextlib.suppress(ClusterConflictError, GrantError, SessionLimitError):  # another wrote it first
                session.version = await self.store.put_session(
                    SessionRecord(**{**_record_fields(to_record(session)), "version": 0}),
                    expected=0,
                    origin=self.replica_id,
                    max_sessions=self._authority.bounds.sessions,
                )
        for record in list(self._hold_records.values()):
            if record.expires_at <= time.time():
                continue
            limits = HoldLimits(self._holds.max_holds, None, self._holds.max_held_revisions)
            with contextlib.suppress(ReconcilerError):
                await self.store.create_hold(record, limits=limits, origin=self.replica_id)
        current = self._runtime.current
        if current is not None:
            digest = content_digest(current.generation.catalog)
            await self.store.ledger_step(digest, floor=current.revision - 1, origin=self.replica_id)

    async def _read_loop(self) -> None:
        reload = False
        backoff = 0.05
        while True:
            try:
                if reload:
                    await self._reload()
                    reload = False
                events = await self.store.read_events(self._last, block_s=self._block_s)
                self._ok()
                backoff = 0.05
                for event in events:
                    self._last = event.id
                    if event.origin != self.replica_id or event.kind == "refresh_done":
                        self._apply(event)
            except StreamGapError:
                log.warning("cluster event log gap: flushing and reloading this replica's cache")
                reload = True
            except StoreUnavailableError as exc:
                self._failed(exc)
                if not self.healthy:
                    self._reload_pending = True
                reload = True  # after an outage: check the epoch, reload what changed meanwhile
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, self._heartbeat_s)

    def _apply(self, event: Event) -> None:
        telemetry.cluster_events.add(1, {"kind": event.kind})
        kind = event.kind
        if kind == "session":
            record = SessionRecord.from_json(event.data)
            if record.id not in self._removed:
                self._install(record)
        elif kind == "session_deleted":
            self._forget(event.key)
            self._authority.remove(event.key, announce=False)
        elif kind == "hold":
            self._adopt(HoldRecord.from_json(event.data))
        elif kind == "hold_released":
            self._hold_records.pop(event.key, None)
            self._holds.release(event.key)
        elif kind == "ledger":
            self._ledger.observe(int(event.key), event.data)
        elif kind == "refresh":
            assert self._tg is not None
            self._tg.start_soon(self._answer_refresh, event.key)
        elif kind == "refresh_done":
            waiting = self._acks.get(event.key)
            if waiting is not None:
                waiting[0].add(event.origin)
                waiting[1].set()
        self.applied.set()
        self.applied = anyio.Event()

    # -- membership and staleness ------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while True:
            current = self._runtime.current
            info = {
                "revision": current.revision if current is not None else None,
                "digest": content_digest(current.generation.catalog) if current is not None else None,
                "sources": source_digests(current.generation.catalog) if current is not None else {},
                "at": time.time(),
            }
            try:
                await self.store.heartbeat(self.replica_id, info, ttl_s=self._heartbeat_s * 3)
                members = await self.store.members()
                self._members = tuple(m.replica_id for m in members)
                self._member_info = {m.replica_id: m.info for m in members}
                self._ok()
            except StoreUnavailableError as exc:
                self._failed(exc)
            await anyio.sleep(self._heartbeat_s)

    async def _monitor_loop(self) -> None:
        tick = min(0.25, self.staleness_s / 4)
        while True:
            await anyio.sleep(tick)
            if not self.healthy and not self._authority.unconfirmed:
                self._authority.unconfirmed = True
                log.error(
                    "cluster store %s not confirmed for %.1f s: shared sessions fail closed, this replica is not ready",
                    self.store.name,
                    self.staleness_s,
                )


def _info(record: HoldRecord) -> HoldInfo:
    return HoldInfo(record.id, record.revision, record.owner, record.created_at, record.expires_at)


def _record_fields(record: SessionRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in SessionRecord.__dataclass_fields__}
