"""The cluster store: the small typed surface every replica shares truth through, and its
in-memory implementation.

What a store holds (records are frozen values; the store never hands out anything mutable):
- **sessions** (:class:`SessionRecord`): owner, token *hash* (never a token), grant policy and
  standing grant, grants with their definition digests (I9), drift marks (I10), pinned revision.
  Each carries a ``version``; :meth:`ClusterStore.put_session` is a compare-and-set on it, and
  creating one (expected version 0) also claims its token hash and checks the cluster-wide
  session bound, in one atomic step.
- **holds** (:class:`HoldRecord`): TTL-bound; the total, per-owner and held-revision limits are
  checked in the same atomic step that creates one, so two replicas cannot both take the last slot.
- **the revision ledger**: :meth:`ClusterStore.ledger_step` reuses the head's revision when the
  content digest equals the head's, else appends the next number — so revision N names the same
  catalog on every replica (I3 cluster-wide).
- **membership**: heartbeat records that expire unless renewed.
- **events** (:class:`Event`): every change above is announced, in the same atomic step, on one
  ordered log that each replica reads from the last id it saw (:meth:`ClusterStore.read_events`).
  A reader whose id fell off the log's bounded tail, or whose store lost its data (a new
  :meth:`ClusterStore.epoch`), gets :class:`StreamGapError` and must reload everything.

Races this surface is shaped for: a write and the event announcing it are one step, so a reader
that saw the event can read the record; a reader that reconnects resumes from its id instead of
missing what happened meanwhile (plain pub/sub would lose it).

:class:`MemoryStore` keeps all of it in one process: the default single-replica deployment, and
two in-process replicas sharing one object (the property tests). ``reconciler/cluster/redis_store.py``
is the shared implementation."""

from __future__ import annotations

import itertools
import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import anyio

from mcp_reconciler.reconciler.errors import (
    ClusterConflictError,
    GrantError,
    HoldLimitError,
    HoldSlotsError,
    ReconcilerError,
    SessionLimitError,
)
from mcp_reconciler.reconciler.token_bucket import BucketSpec, BucketTable, Refusal

#: How many events the log keeps (approximately, for Redis): a replica further behind reloads.
EVENT_LOG_MAX = 10_000


class StreamGapError(ReconcilerError):
    """The reader's last event id is no longer in the log (trimmed, or the store lost its data):
    the reader must flush its cache and reload every record."""

    code = "cluster_stream_gap"
    retryable = True


class StoreUnavailableError(ReconcilerError):
    """The store could not be reached (connection refused, timed out)."""

    code = "cluster_unavailable"
    retryable = True


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A shared session as the store keeps it. ``grants`` maps grant keys (``kind:name``) to the
    definition digest seen at grant time; ``version`` is the compare-and-set version (0: not
    stored yet)."""

    id: str
    owner: str
    token_hash: str
    created_at: float
    policy: str
    grants: Mapping[str, str] = field(default_factory=dict)
    drift_seen: tuple[str, ...] = ()
    standing_sources: tuple[str, ...] | None = None
    standing_names: tuple[str, ...] | None = None
    pinned_revision: int | None = None
    control_tools: bool = False
    version: int = 0
    view: str | None = None  # the named view the session is bound to (ADR 0026)
    discovery: str | None = None  # the session's own discovery mode (ADR 0029; not its found set)

    def to_json(self) -> str:
        """A stable JSON form (the store's payload; ``version`` included)."""
        data = asdict(self)
        data["grants"] = dict(self.grants)
        if self.view is None:
            del data["view"]  # records of sessions without a view keep their bytes
        if self.discovery is None:
            del data["discovery"]  # likewise without a mode of their own
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(raw: str | bytes) -> SessionRecord:
        """The inverse of :meth:`to_json`."""
        data = json.loads(raw)
        for key in ("drift_seen", "standing_sources", "standing_names"):
            if data.get(key) is not None:
                data[key] = tuple(data[key])
        return SessionRecord(**data)


@dataclass(frozen=True, slots=True)
class HoldRecord:
    """A shared revision hold: ``revision`` stays live on every replica that has it until
    ``expires_at`` (wall clock) or release."""

    id: str
    revision: int
    owner: str
    created_at: float
    expires_at: float

    def to_json(self) -> str:
        """A stable JSON form (the store's payload)."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(raw: str | bytes) -> HoldRecord:
        """The inverse of :meth:`to_json`."""
        return HoldRecord(**json.loads(raw))


@dataclass(frozen=True, slots=True)
class HoldLimits:
    """The limits a hold creation is checked against, atomically with the creation."""

    max_holds: int
    max_per_owner: int | None  # None: no per-principal limit
    max_held_revisions: int


@dataclass(frozen=True, slots=True)
class Event:
    """One change announced on the event log. ``kind``: ``session`` | ``session_deleted`` |
    ``hold`` | ``hold_released`` | ``ledger`` | ``refresh`` | ``refresh_done``; ``key`` the
    record's id (or revision, or refresh request id); ``origin`` the replica that made it;
    ``data`` the record's JSON when the kind carries one."""

    id: str
    kind: str
    key: str
    origin: str
    data: str = ""


@dataclass(frozen=True, slots=True)
class Member:
    """A live replica as its last heartbeat described it."""

    replica_id: str
    info: Mapping[str, Any]


class ClusterStore(Protocol):
    """What replicas share (module docstring). Every method may raise
    :class:`StoreUnavailableError`; writes announce themselves on the event log atomically."""

    name: str

    async def connect(self) -> None:
        """Open the client (no round trip needed; failures surface on the first call)."""
        ...

    async def aclose(self) -> None:
        """Close the client (idempotent); the data stays in the store."""
        ...

    async def epoch(self) -> str:
        """An id of the store's data set; it changes when the data is lost (a restarted store)."""
        ...

    async def last_event_id(self) -> str:
        """The newest event id ("0" when none): a reader that loads everything starts after it."""
        ...

    async def read_events(self, after: str, *, block_s: float, count: int = 256) -> list[Event]:
        """Events after ``after``, oldest first; waits up to ``block_s`` for one. StreamGapError
        when ``after`` is older than the log's tail."""
        ...

    async def load_sessions(self) -> list[SessionRecord]:
        """Every stored session record."""
        ...

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """The record of ``session_id``, or ``None``."""
        ...

    async def session_for_token(self, token_hash: str) -> SessionRecord | None:
        """The session whose token hashes to ``token_hash``, if any."""
        ...

    async def put_session(self, record: SessionRecord, *, expected: int, origin: str, max_sessions: int) -> int:
        """Store ``record`` if the stored version is ``expected`` (0: it must not exist; then
        its token hash is claimed and the cluster-wide ``max_sessions`` bound checked); returns
        the new version. ClusterConflictError, SessionLimitError, GrantError (token in use)."""
        ...

    async def delete_session(self, session_id: str, *, origin: str) -> bool:
        """Delete a session and free its token claim; ``False`` if it did not exist. Announced."""
        ...

    async def create_hold(self, record: HoldRecord, *, limits: HoldLimits, origin: str) -> HoldRecord:
        """Create a hold if ``limits`` allow it (HoldLimitError, HoldSlotsError)."""
        ...

    async def release_hold(self, hold_id: str, *, origin: str) -> HoldRecord | None:
        """Release a hold; its record, or ``None`` if it did not exist (or expired). Announced."""
        ...

    async def list_holds(self) -> list[HoldRecord]:
        """The holds that have not expired."""
        ...

    async def ledger_step(self, digest: str, *, floor: int, origin: str) -> int:
        """The revision for a catalog with content ``digest``: the head's when its digest is
        ``digest``, else the next number (at least ``floor + 1``), appended as the new head."""
        ...

    async def ledger_head(self) -> tuple[int, str] | None:
        """The ledger's head ``(revision, content digest)``, or ``None`` before the first step."""
        ...

    async def heartbeat(self, replica_id: str, info: Mapping[str, Any], *, ttl_s: float) -> None:
        """Renew this replica's membership record for ``ttl_s`` seconds, with ``info``."""
        ...

    async def leave(self, replica_id: str) -> None:
        """Remove this replica's membership record now (a clean stop)."""
        ...

    async def members(self) -> list[Member]:
        """The replicas whose membership record has not expired."""
        ...

    async def announce(self, kind: str, key: str, *, origin: str, data: str = "") -> str:
        """Append an event that changes no record (refresh requests and answers)."""
        ...

    async def take_tokens(self, specs: Sequence[BucketSpec]) -> Refusal | None:
        """One token from every rate-limit bucket in ``specs``, or none (``None``: taken);
        atomic, and the buckets are shared by every replica (ADR 0033). Not announced."""
        ...


_hold_ids = itertools.count(1)


def new_hold_id() -> str:
    """A hold id unique across replicas."""
    return f"h{next(_hold_ids)}-{secrets.token_hex(6)}"


def check_hold_limits(record: HoldRecord, holds: Sequence[HoldRecord], limits: HoldLimits) -> None:
    """The hold-creation rule both stores apply (Redis in Lua, with the same messages)."""
    if len(holds) >= limits.max_holds:
        raise HoldLimitError(
            f"at most {limits.max_holds} revision holds may exist (gateway.limits.holds); release one first",
            bound="gateway.limits.holds",
            limit=limits.max_holds,
        )
    if limits.max_per_owner is not None and sum(1 for h in holds if h.owner == record.owner) >= limits.max_per_owner:
        raise HoldLimitError(
            f"a principal may hold at most {limits.max_per_owner} revision holds "
            "(gateway.limits.holds_per_principal); release one first",
            bound="gateway.limits.holds_per_principal",
            limit=limits.max_per_owner,
        )
    held = {h.revision for h in holds}
    if record.revision not in held and len(held) >= limits.max_held_revisions:
        raise HoldSlotsError(
            f"holds may keep at most {limits.max_held_revisions} revisions alive, so that they can never defer "
            "publication: hold one of the held revisions, or retry when a hold is released or expires"
        )


class MemoryStore:
    """A :class:`ClusterStore` in this process's memory. Atomic because every method's critical
    part runs without awaiting; the event log is a bounded list with integer ids."""

    name = "memory"

    def __init__(self, *, wall_clock: Any = time.time, event_log_max: int = EVENT_LOG_MAX) -> None:
        self._wall = wall_clock
        self._epoch = secrets.token_hex(8)
        self._sessions: dict[str, SessionRecord] = {}
        self._tokens: dict[str, str] = {}
        self._holds: dict[str, HoldRecord] = {}
        self._head: tuple[int, str] | None = None
        self._members: dict[str, tuple[float, Mapping[str, Any]]] = {}
        self._events: list[Event] = []
        self._seq = 0
        self._max = event_log_max
        self._changed = anyio.Event()
        self._buckets = BucketTable()

    async def connect(self) -> None:
        """As :meth:`ClusterStore.connect`."""
        return None

    async def aclose(self) -> None:
        """As :meth:`ClusterStore.aclose`."""
        return None

    async def epoch(self) -> str:
        """As :meth:`ClusterStore.epoch`."""
        return self._epoch

    def _emit(self, kind: str, key: str, origin: str, data: str = "") -> str:
        self._seq += 1
        event = Event(str(self._seq), kind, key, origin, data)
        self._events.append(event)
        if len(self._events) > self._max:
            del self._events[: len(self._events) - self._max]
        self._changed.set()
        self._changed = anyio.Event()
        return event.id

    async def last_event_id(self) -> str:
        """As :meth:`ClusterStore.last_event_id`."""
        return str(self._seq)

    async def read_events(self, after: str, *, block_s: float, count: int = 256) -> list[Event]:
        """As :meth:`ClusterStore.read_events`."""
        position = int(after)
        if position >= self._seq and block_s > 0:
            with anyio.move_on_after(block_s):
                await self._changed.wait()
        if self._events and position < int(self._events[0].id) - 1:
            raise StreamGapError("the reader fell behind the event log")
        return [e for e in self._events if int(e.id) > position][:count]

    async def load_sessions(self) -> list[SessionRecord]:
        """As :meth:`ClusterStore.load_sessions`."""
        return list(self._sessions.values())

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """As :meth:`ClusterStore.get_session`."""
        return self._sessions.get(session_id)

    async def session_for_token(self, token_hash: str) -> SessionRecord | None:
        """As :meth:`ClusterStore.session_for_token`."""
        sid = self._tokens.get(token_hash)
        return self._sessions.get(sid) if sid is not None else None

    async def put_session(self, record: SessionRecord, *, expected: int, origin: str, max_sessions: int) -> int:
        """As :meth:`ClusterStore.put_session`."""
        current = self._sessions.get(record.id)
        if (current.version if current is not None else 0) != expected:
            raise ClusterConflictError(f"session {record.id}")
        if current is None:
            if len(self._sessions) >= max_sessions:
                raise SessionLimitError(
                    f"at most {max_sessions} sessions may exist (gateway.limits.sessions); delete unused sessions",
                    bound="gateway.limits.sessions",
                    limit=max_sessions,
                )
            if record.token_hash in self._tokens:
                raise GrantError("that token is already in use by another session")
            self._tokens[record.token_hash] = record.id
        elif current.token_hash != record.token_hash:
            self._tokens.pop(current.token_hash, None)
            self._tokens[record.token_hash] = record.id
        stored = _with_version(record, expected + 1)
        self._sessions[record.id] = stored
        self._emit("session", record.id, origin, stored.to_json())
        return stored.version

    async def delete_session(self, session_id: str, *, origin: str) -> bool:
        """As :meth:`ClusterStore.delete_session`."""
        record = self._sessions.pop(session_id, None)
        if record is None:
            return False
        self._tokens.pop(record.token_hash, None)
        self._emit("session_deleted", session_id, origin)
        return True

    def _expire_holds(self) -> None:
        now = self._wall()
        for hold_id, hold in list(self._holds.items()):
            if hold.expires_at <= now:
                del self._holds[hold_id]

    async def create_hold(self, record: HoldRecord, *, limits: HoldLimits, origin: str) -> HoldRecord:
        """As :meth:`ClusterStore.create_hold`."""
        self._expire_holds()
        check_hold_limits(record, list(self._holds.values()), limits)
        self._holds[record.id] = record
        self._emit("hold", record.id, origin, record.to_json())
        return record

    async def release_hold(self, hold_id: str, *, origin: str) -> HoldRecord | None:
        """As :meth:`ClusterStore.release_hold`."""
        self._expire_holds()
        record = self._holds.pop(hold_id, None)
        if record is not None:
            self._emit("hold_released", hold_id, origin, record.to_json())
        return record

    async def list_holds(self) -> list[HoldRecord]:
        """As :meth:`ClusterStore.list_holds`."""
        self._expire_holds()
        return list(self._holds.values())

    async def ledger_step(self, digest: str, *, floor: int, origin: str) -> int:
        """As :meth:`ClusterStore.ledger_step`."""
        if self._head is not None and self._head[1] == digest:
            return self._head[0]
        revision = max(self._head[0] if self._head is not None else 0, floor) + 1
        self._head = (revision, digest)
        self._emit("ledger", str(revision), origin, digest)
        return revision

    async def ledger_head(self) -> tuple[int, str] | None:
        """As :meth:`ClusterStore.ledger_head`."""
        return self._head

    async def heartbeat(self, replica_id: str, info: Mapping[str, Any], *, ttl_s: float) -> None:
        """As :meth:`ClusterStore.heartbeat`."""
        self._members[replica_id] = (self._wall() + ttl_s, dict(info))

    async def leave(self, replica_id: str) -> None:
        """As :meth:`ClusterStore.leave`."""
        self._members.pop(replica_id, None)

    async def members(self) -> list[Member]:
        """As :meth:`ClusterStore.members`."""
        now = self._wall()
        return [Member(rid, info) for rid, (until, info) in sorted(self._members.items()) if until > now]

    async def announce(self, kind: str, key: str, *, origin: str, data: str = "") -> str:
        """As :meth:`ClusterStore.announce`."""
        return self._emit(kind, key, origin, data)

    async def take_tokens(self, specs: Sequence[BucketSpec]) -> Refusal | None:
        """As :meth:`ClusterStore.take_tokens` (one table for every replica of this process)."""
        return self._buckets.take(specs)


def _with_version(record: SessionRecord, version: int) -> SessionRecord:
    data = asdict(record)
    data["version"] = version
    data["grants"] = dict(record.grants)
    return SessionRecord(**data)
