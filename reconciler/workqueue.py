"""The coalescing trigger queue (I6, I7), after client-go's workqueue.

Triggers mark keys dirty. The loop takes the whole dirty set as one batch; at most one batch is
processed at a time; batches start at least ``cooldown_s`` apart, and after a failed batch its
keys go back into the dirty set and the next start backs off exponentially (with jitter).

Waiters (I7): ``request(keys)`` returns a :class:`Ticket` recorded *before* the keys are marked,
so the ticket is answered by the first batch that starts after it — which necessarily includes
its keys. A waiter that gives up (timeout, cancel) abandons only its own wait: the batch runs
anyway and other waiters are unaffected; the per-batch slot is dropped when the batch ends."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.backoff import exponential_delay
from mcp_reconciler.reconciler.errors import ReconcilerClosedError

T = TypeVar("T")

ALL = "all"
CONFIG = "config"


@dataclass(frozen=True, slots=True)
class Batch:
    """One unit of work: the dirty keys taken together, numbered by start order."""

    seq: int
    keys: frozenset[str]
    started_at: float
    reasons: frozenset[str] = frozenset()  # why the keys were marked (events.TriggerReason)


class _Slot(Generic[T]):
    __slots__ = ("event", "filled", "value")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.filled = False
        self.value: T | None = None


@dataclass(slots=True)
class Ticket(Generic[T]):
    """A request's claim on the first batch that starts after it."""

    seq: int
    _slot: _Slot[T] = field(repr=False)

    async def wait(self) -> T:
        """The outcome of batch ``seq`` (also after it finished). Cancelling this wait cancels
        nothing shared; ReconcilerClosedError if the queue shut down before the batch ran."""
        await self._slot.event.wait()
        if not self._slot.filled:
            raise ReconcilerClosedError()
        return self._slot.value  # type: ignore[return-value]


class TriggerQueue(Generic[T]):
    """The coalescing trigger queue (see the module docstring): producers call :meth:`add` or
    :meth:`request`, one consumer loops :meth:`get` / :meth:`done`. Single event loop, not thread-safe;
    ``cooldown_s`` spaces batch starts and ``retry_max_s`` caps the backoff after failed batches."""

    def __init__(
        self,
        *,
        cooldown_s: float = 1.0,
        retry_max_s: float = 30.0,
        clock: Callable[[], float] = anyio.current_time,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.cooldown_s = cooldown_s
        self.retry_max_s = retry_max_s
        self._clock = clock
        self._jitter = jitter
        self._dirty: set[str] = set()
        self._reasons: set[str] = set()  # why the dirty keys were marked (provenance, never a key)
        self._processing: frozenset[str] | None = None
        self._started = 0
        self._not_before = float("-inf")
        self._failures = 0
        self._wake = anyio.Event()
        self._slots: dict[int, _Slot[T]] = {}
        self._shutdown = False
        self.triggers = 0
        self.coalesced = 0
        self.batches_done = 0

    # -- producers ---------------------------------------------------------------------------

    def add(self, key: str, reason: str = "refresh") -> None:
        """Mark ``key`` dirty for ``reason`` (``events.TriggerReason``: recorded in the batch,
        for provenance only). O(1), never blocks, never lost while the queue is open (I6)."""
        if self._shutdown:
            return
        self.triggers += 1
        self._reasons.add(reason)
        telemetry.triggers_received.add(1, {"key_kind": _key_kind(key)})
        if key in self._dirty:
            self.coalesced += 1
            telemetry.triggers_coalesced.add(1)
            return
        self._dirty.add(key)
        self._wake.set()

    def request(self, keys: Iterable[str], reason: str = "refresh") -> Ticket[T]:
        """Mark ``keys`` dirty (for ``reason``) and return a ticket for the first batch that
        starts afterwards.

        With no keys, the ticket observes the next batch that starts for any reason."""
        if self._shutdown:
            raise ReconcilerClosedError()
        seq = self._started + 1
        slot = self._slots.setdefault(seq, _Slot())
        ticket: Ticket[T] = Ticket(seq, slot)
        for key in keys:
            self.add(key, reason)
        return ticket

    # -- the consumer ------------------------------------------------------------------------

    @property
    def dirty(self) -> frozenset[str]:
        """A snapshot of the keys waiting for the next batch."""
        return frozenset(self._dirty)

    @property
    def processing(self) -> frozenset[str] | None:
        """The keys of the batch being processed, or None between ``done`` and the next ``get``."""
        return self._processing

    @property
    def started(self) -> int:
        """How many batches have started; the latest batch's ``seq``."""
        return self._started

    @property
    def next_start_not_before(self) -> float:
        """The earliest time (queue clock) the next batch may start: cooldown or failure backoff."""
        return self._not_before

    async def get(self) -> Batch:
        """Wait for dirty keys and the cooldown, then take them all as one batch."""
        while True:
            if self._shutdown:
                raise ReconcilerClosedError()
            if self._processing is not None:
                raise RuntimeError("TriggerQueue.get called while a batch is still processing")
            if self._dirty:
                delay = self._not_before - self._clock()
                if delay <= 0:
                    break
                with anyio.move_on_after(delay):
                    await self._wait_wake()
                continue
            await self._wait_wake()
        keys = frozenset(self._dirty)
        reasons = frozenset(self._reasons)
        self._dirty.clear()
        self._reasons.clear()
        self._started += 1
        now = self._clock()
        self._processing = keys
        self._not_before = now + self.cooldown_s
        return Batch(seq=self._started, keys=keys, started_at=now, reasons=reasons)

    def done(self, batch: Batch, outcome: T, *, ok: bool) -> None:
        """Finish ``batch``: answer its waiters; on failure keep its keys and back off (I6)."""
        if self._processing is None or batch.seq != self._started:
            raise RuntimeError("TriggerQueue.done for a batch that is not the one processing")
        self._processing = None
        self.batches_done += 1
        if ok:
            self._failures = 0
        else:
            self._failures += 1
            self._dirty |= batch.keys
            self._reasons |= {*batch.reasons, "retry"}
            # Equal jitter: between half and all of min(retry_max, cooldown * 2**failures).
            backoff = exponential_delay(
                self._failures + 1, base_s=self.cooldown_s, cap_s=self.retry_max_s, spread=0.5, rand=self._jitter()
            )
            self._not_before = max(self._not_before, self._clock() + backoff)
            self._wake.set()
        slot = self._slots.pop(batch.seq, None)
        if slot is not None:
            slot.value = outcome
            slot.filled = True
            slot.event.set()

    def shutdown(self) -> None:
        """Stop producing batches; every waiter is released with ReconcilerClosedError."""
        self._shutdown = True
        self._wake.set()
        for slot in self._slots.values():
            slot.event.set()
        self._slots.clear()

    async def _wait_wake(self) -> None:
        await self._wake.wait()
        self._wake = anyio.Event()

    def pending_waiter_slots(self) -> int:
        """Waiter slots held: one per batch requested and not yet done (dropped when it ends)."""
        return len(self._slots)


def _key_kind(key: str) -> str:
    return key if key in (ALL, CONFIG) else "source"
