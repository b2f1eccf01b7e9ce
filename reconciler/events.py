"""Engine events: a numbered, ordered record of what the engine did, for whoever follows it
(the ``/v1/events`` stream, the operator console).

Five kinds, each a frozen dataclass: :class:`Published` (a revision became current, and why:
the trigger reasons and keys of the cycle that built it), :class:`Retired` (a superseded
revision closed: drained to zero pins, or forced at its drain deadline), :class:`SourceChanged`
(a source's state or error changed), :class:`SessionChanged` (a session was created or removed,
or grants changed outside a request) and :class:`HoldChanged` (a revision hold was added,
released or expired).

Design. :class:`EventLog` is synchronous: :meth:`EventLog.emit` numbers the event, keeps it in a
bounded ring (so a follower that reconnects can resume from its last id) and calls every
subscriber before it returns. Emitters are engine callbacks that already run without awaiting
(publication listeners, health updates, hold bookkeeping), so ids follow the order in which the
engine did things, with no lock and no task. Subscribers must not block or await: the HTTP edge
copies each event into a bounded per-client buffer and drops a client whose buffer is full
(``api/events.py``), so a slow follower never slows the engine nor grows memory. A subscriber
that raises is logged and removed from nothing: the next event reaches it again.

No HTTP framework is imported here; the edge maps events to JSON."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Literal

from mcp_reconciler.reconciler import telemetry

log = logging.getLogger("mcp_reconciler.events")

EventType = Literal["publish", "retire", "source", "session", "hold"]

#: Why a key was marked dirty. ``startup``: the first cycle; ``config``: a config file or drop-in
#: changed; ``watched_file``: a source's ``watch`` input changed; ``list_changed``: an upstream
#: said its lists changed; ``reconnect``: an upstream connection ended or its reconnect came due;
#: ``refresh``: someone asked (API, CLI, control tool); ``poll``: the source's ``poll_seconds``;
#: ``retry``: a failed cycle's keys, tried again.
TriggerReason = Literal["startup", "config", "watched_file", "list_changed", "reconnect", "refresh", "poll", "retry"]


@dataclass(frozen=True, slots=True)
class Trigger:
    """Why a candidate was built: the reasons its keys were marked dirty, and the keys
    (source names, ``config``, ``all``), both sorted."""

    reasons: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()

    def merged(self, other: Trigger) -> Trigger:
        """Both triggers' reasons and keys (a deferred candidate replaced by a newer one)."""
        return Trigger(tuple(sorted({*self.reasons, *other.reasons})), tuple(sorted({*self.keys, *other.keys})))


@dataclass(frozen=True, slots=True)
class Published:
    """Revision ``revision`` became current. ``previous`` is the revision it superseded (with
    the pins it held then, and the wall-clock drain deadline if it keeps draining; ``None`` when
    it closed at once)."""

    type: ClassVar[EventType] = "publish"
    revision: int
    digest: str
    built_at: float
    published_at: float
    entries: int
    trigger: Trigger
    previous: int | None = None
    previous_pins: int = 0
    previous_drain_deadline_at: float | None = None
    owner: ClassVar[str | None] = None


@dataclass(frozen=True, slots=True)
class Retired:
    """A superseded revision closed. ``forced``: its drain deadline passed with ``pins_left``
    pins and ``operations_cancelled`` operations still running (they were cancelled)."""

    type: ClassVar[EventType] = "retire"
    revision: int
    published_at: float
    superseded_at: float | None
    closed_at: float
    forced: bool = False
    pins_left: int = 0
    operations_cancelled: int = 0
    owner: ClassVar[str | None] = None


@dataclass(frozen=True, slots=True)
class SourceChanged:
    """A source's state (ready | stale | failed | connecting) or its sanitized last error changed."""

    type: ClassVar[EventType] = "source"
    source: str
    state: str
    previous_state: str | None
    last_error: str | None
    consecutive_failures: int
    owner: ClassVar[str | None] = None


@dataclass(frozen=True, slots=True)
class SessionChanged:
    """A session was ``created`` or ``removed`` (``session_id``, ``owner``: its principal), or
    grants changed outside a request (``grants``: declared sessions re-applied, standing grants
    applied; ``session_id`` and ``owner`` are ``None``)."""

    type: ClassVar[EventType] = "session"
    change: Literal["created", "removed", "grants"]
    session_id: str | None = None
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class HoldChanged:
    """A revision hold was ``added``, ``released`` or ``expired``."""

    type: ClassVar[EventType] = "hold"
    change: Literal["added", "released", "expired"]
    hold_id: str
    revision: int
    owner: str
    expires_at: float


Payload = Published | Retired | SourceChanged | SessionChanged | HoldChanged


@dataclass(frozen=True, slots=True)
class EngineEvent:
    """One event: its id (strictly increasing per engine, from 1), the wall-clock time it was
    emitted, and what happened. ``owner`` is the principal it concerns (``None``: the gateway
    as a whole)."""

    id: int
    at: float
    payload: Payload

    @property
    def type(self) -> EventType:
        """The event's type (``publish`` | ``retire`` | ``source`` | ``session`` | ``hold``)."""
        return self.payload.type

    @property
    def owner(self) -> str | None:
        """The principal the event concerns (``None``: the gateway as a whole)."""
        return self.payload.owner


Subscriber = Callable[[EngineEvent], None]


class EventLog:
    """Numbers engine events, keeps the newest ``replay`` of them, and hands each to every
    subscriber synchronously, in id order (module docstring)."""

    def __init__(self, *, replay: int = 256, wall_clock: Callable[[], float] = time.time) -> None:
        self._ring: deque[EngineEvent] = deque(maxlen=max(1, replay))
        self._subscribers: list[Subscriber] = []
        self._closers: list[Callable[[], None]] = []
        self._closed = False
        self._next = 1
        self._wall = wall_clock

    @property
    def last_id(self) -> int:
        """The id of the newest event (0 before the first)."""
        return self._next - 1

    def emit(self, payload: Payload) -> None:
        """Record ``payload`` as the next event and deliver it to every subscriber; never raises
        on a subscriber's account."""
        event = EngineEvent(self._next, self._wall(), payload)
        self._next += 1
        telemetry.events_emitted.add(1, {"type": payload.type})
        self._ring.append(event)
        for subscriber in list(self._subscribers):
            try:
                subscriber(event)
            except Exception:
                log.exception("engine event subscriber failed")

    def subscribe(self, subscriber: Subscriber, on_close: Callable[[], None] | None = None) -> Callable[[], None]:
        """Deliver every later event to ``subscriber`` (synchronously; it must not block), and
        call ``on_close()`` when the log closes (at once if it already has); returns a remover
        (idempotent)."""
        self._subscribers.append(subscriber)
        if on_close is not None:
            if self._closed:
                on_close()
            else:
                self._closers.append(on_close)

        def remove() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)
            if on_close is not None and on_close in self._closers:
                self._closers.remove(on_close)

        return remove

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran: the engine is stopping and no follower should wait on."""
        return self._closed

    def close(self) -> None:
        """Tell every subscriber the engine is stopping (idempotent); later events are still
        recorded and delivered, but followers are expected to end their streams."""
        if self._closed:
            return
        self._closed = True
        closers, self._closers = self._closers, []
        for closer in closers:
            try:
                closer()
            except Exception:
                log.exception("engine event close callback failed")

    @property
    def subscribers(self) -> int:
        """How many subscribers are registered now."""
        return len(self._subscribers)

    def since(self, last_id: int) -> tuple[EngineEvent, ...] | None:
        """The kept events after ``last_id``, oldest first; ``None`` when some of them are no
        longer kept (the follower missed events and must re-read state)."""
        if last_id >= self.last_id:
            return ()
        oldest = self._ring[0].id if self._ring else self._next
        if last_id + 1 < oldest:
            return None
        return tuple(e for e in self._ring if e.id > last_id)
