"""The limiter: the one place a forwarded call is checked against ``rate_limits:`` (issue 30,
ADR 0033).

The front door's forwarding operation (``api/frontdoor/forwarding.py``) asks, for every
``tools/call``, ``resources/read`` and ``prompts/get`` it is about to send upstream:

1. :meth:`Limiter.admit` (:meth:`Limiter.take` by scope values) — one token from every bucket
   of every rate rule the call matches, all or none (``reconciler/token_bucket.py``), else
   :class:`~reconciler.errors.RateLimitedError` naming the rule that refuses longest and when to
   retry. It returns the call's slot:
2. :meth:`Limiter.slot` — a slot of the source's concurrency rule for as long as the call runs:
   free, or a place in a bounded FIFO queue for at most ``queue_timeout_s``, else
   :class:`~reconciler.errors.ConcurrencyLimitedError`.

**Reconciled like any input.** :meth:`Limiter.set_policy` swaps one reference to an immutable
:class:`~reconciler.rate_limits.LimitPolicy` after each cycle (the engine's desired-state
listener). Buckets are keyed by rule name and survive the swap (a reload never hands out a fresh
burst); a concurrency gate whose rule changed is resized in place, so calls already in flight
stay counted.

**Shared across replicas.** Given a store with ``take_tokens`` (the cluster store), buckets live
there: with Redis, one Lua script per limited call (one round trip), atomic across the call's
buckets on the server's clock. When the store fails, ``policy.fail`` decides (``closed``: refuse
with ``cluster_unavailable``; ``open``: admit), and for :data:`RETRY_STORE_AFTER_S` calls do not
wait on the store again, so an outage costs one timeout, not one per call. Concurrency gates
are per replica (ADR 0033 says why).

Cost with no rule: one attribute read. Each refusal is counted (``gateway.limits.refused``)."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, Protocol

import anyio

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.errors import (
    ConcurrencyLimitedError,
    LimitUnavailableError,
    RateLimitedError,
    ReconcilerError,
)
from mcp_reconciler.reconciler.model import CatalogEntry, EntryKind
from mcp_reconciler.reconciler.rate_limits import NO_LIMITS, ConcurrencyRule, FailMode, LimitPolicy, RateRule
from mcp_reconciler.reconciler.token_bucket import BucketSpec, BucketTable, Refusal

log = logging.getLogger("mcp_reconciler.limits")

#: After the shared store failed, calls skip it (and apply ``fail``) for this long.
RETRY_STORE_AFTER_S = 1.0
#: The retry-after a refusal for an unreachable store suggests.
UNAVAILABLE_RETRY_S = 1.0
#: The slot of a call no concurrency rule covers (``nullcontext`` is reusable and reentrant).
NO_SLOT: AbstractAsyncContextManager[Any] = nullcontext()


class Caller(Protocol):
    """Who makes a call: a session (``reconciler/authority.py::Session``) id and owner principal."""

    @property
    def id(self) -> str:
        """The session id (``scope: session``)."""
        ...

    @property
    def owner(self) -> str:
        """Its owner's role-qualified principal id (``scope: principal``)."""
        ...


class SharedBuckets(Protocol):
    """Buckets shared by replicas (``ClusterStore.take_tokens``). Raises the store's
    ``StoreUnavailableError`` (a :class:`ReconcilerError`) when it cannot be reached."""

    async def take_tokens(self, specs: Sequence[BucketSpec]) -> Refusal | None:
        """As :meth:`BucketTable.take`, atomically in the store."""
        ...


class Gate:
    """Calls in flight to one source under one concurrency rule: at most ``rule.max`` hold a
    slot, at most ``rule.queue`` wait for one (FIFO: a freed slot is handed to the oldest waiter,
    never raced for), each at most ``rule.queue_timeout_s``."""

    def __init__(self, rule: ConcurrencyRule, clock: Callable[[], float] = time.monotonic) -> None:
        self.rule = rule
        self.in_flight = 0
        self._waiters: deque[anyio.Event] = deque()
        self._clock = clock
        self._held_s = 0.0  # moving average of how long a slot is held: the retry-after hint

    @property
    def waiting(self) -> int:
        """Calls queued for a slot now."""
        return len(self._waiters)

    def resize(self, rule: ConcurrencyRule) -> None:
        """Apply a reloaded rule: waiters get the slots a larger ``max`` frees; a smaller one
        takes effect as calls finish (no call in flight is stopped)."""
        self.rule = rule
        while self._waiters and self.in_flight < rule.max:
            self.in_flight += 1
            self._waiters.popleft().set()

    def _retry_after(self) -> float:
        rule = self.rule
        estimate = max(self._held_s, 0.01) * (len(self._waiters) + 1) / rule.max
        return min(max(estimate, 0.01), rule.queue_timeout_s)

    def _refuse(self, *, waited: bool) -> ConcurrencyLimitedError:
        reason = "queue_timeout" if waited else "concurrency"
        telemetry.limits_refused.add(1, {"limit": self.rule.name, "reason": reason})
        return ConcurrencyLimitedError(self.rule.name, self._retry_after(), waited=waited)

    def _release(self) -> None:
        # Hand the slot over (in_flight unchanged) unless a smaller reloaded max must shrink first.
        if self._waiters and self.in_flight <= self.rule.max:
            self._waiters.popleft().set()
        else:
            self.in_flight -= 1

    def slot(self) -> Slot:
        """Hold a slot for an ``async with`` block (class docstring); refuses with
        ConcurrencyLimitedError."""
        return Slot(self)

    async def _acquire(self) -> None:
        rule = self.rule
        if self.in_flight < rule.max and not self._waiters:
            self.in_flight += 1
            return
        if len(self._waiters) >= rule.queue:
            raise self._refuse(waited=False)
        handed = anyio.Event()
        self._waiters.append(handed)
        telemetry.limits_queued.add(1, {"limit": rule.name})
        try:
            with anyio.move_on_after(rule.queue_timeout_s):
                await handed.wait()
        except BaseException:
            if handed.is_set():
                self._release()  # a slot was handed over as we were cancelled: pass it on
            else:
                self._waiters.remove(handed)
            raise
        if not handed.is_set():
            self._waiters.remove(handed)
            raise self._refuse(waited=True)

    def _done(self, held_s: float) -> None:
        self._held_s += 0.2 * (held_s - self._held_s)
        self._release()


class Slot:
    """One call's slot of a :class:`Gate` (a plain class: a generator-based context manager
    costs several µs a call on this path)."""

    __slots__ = ("_gate", "_started")

    def __init__(self, gate: Gate) -> None:
        self._gate = gate
        self._started = 0.0

    async def __aenter__(self) -> None:
        await self._gate._acquire()
        self._started = self._gate._clock()

    async def __aexit__(self, *_exc: object) -> None:
        gate = self._gate
        gate._done(gate._clock() - self._started)


class Limiter:
    """Rate and concurrency limits for forwarded calls (module docstring). ``shared``: the
    cluster store's buckets (``None``: buckets in this process)."""

    def __init__(self, shared: SharedBuckets | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._policy = NO_LIMITS
        self._shared = shared
        self._local = BucketTable(clock)
        self._clock = clock
        self._gates: dict[tuple[str, str], Gate] = {}
        self._store_down_until = 0.0

    @property
    def policy(self) -> LimitPolicy:
        """The policy in force."""
        return self._policy

    @property
    def shared(self) -> bool:
        """Whether buckets live in the cluster store."""
        return self._shared is not None

    def set_policy(self, policy: LimitPolicy) -> None:
        """Swap in ``policy`` (one reference; see the module docstring for buckets and gates)."""
        if policy == self._policy:
            return
        rules = {c.name: c for c in policy.concurrency}
        for key, gate in list(self._gates.items()):
            rule = rules.get(key[0])
            if rule is None or policy.concurrency_for(key[1]) is not rule:
                del self._gates[key]  # calls in flight keep their gate object until they finish
            elif rule != gate.rule:
                gate.resize(rule)
        self._policy = policy
        log.info(
            "limits: %d rate rule(s), %d concurrency rule(s), fail %s",
            len(policy.rates),
            len(policy.concurrency),
            policy.fail.value,
        )

    async def admit(self, caller: Caller, entry: CatalogEntry) -> AbstractAsyncContextManager[Any]:
        """Take the tokens of ``caller``'s call on ``entry`` or raise (module docstring); returns
        the call's concurrency :meth:`slot`, to hold while the upstream works on the call. A read
        through a resource template counts as a ``resource`` under the template's name."""
        kind = EntryKind.RESOURCE if entry.kind is EntryKind.RESOURCE_TEMPLATE else entry.kind
        await self.take(caller.id, caller.owner, kind, entry.exposed_name, entry.source)
        return self.slot(entry.source)

    async def take(self, session_id: str, principal: str, kind: EntryKind, name: str, source: str) -> None:
        """The rate part of :meth:`admit`, by scope values: take the tokens or raise."""
        policy = self._policy
        if not policy.rates:
            return
        rules = policy.rates_for(kind, name, source)
        if not rules:
            return
        specs = [BucketSpec(_key(r, session_id, principal, name, source), r.rate, r.burst) for r in rules]
        refusal = self._local.take(specs) if self._shared is None else await self._take_shared(rules, specs, policy)
        if refusal is not None:
            rule = rules[refusal.index]
            telemetry.limits_refused.add(1, {"limit": rule.name, "reason": "rate"})
            raise RateLimitedError(rule.name, refusal.retry_after_s)

    async def _take_shared(
        self, rules: Sequence[RateRule], specs: Sequence[BucketSpec], policy: LimitPolicy
    ) -> Refusal | None:
        assert self._shared is not None
        if self._clock() >= self._store_down_until:
            try:
                refusal = await self._shared.take_tokens(specs)
            except ReconcilerError as exc:  # StoreUnavailableError: the store's own bounded failure
                if self._store_down_until == 0.0:
                    log.warning("limits: the cluster store cannot be reached (%s); failing %s", exc, policy.fail.value)
                self._store_down_until = self._clock() + RETRY_STORE_AFTER_S
            else:
                if self._store_down_until:
                    self.store_recovered()
                return refusal
        names = rules[0].name
        if policy.fail is FailMode.OPEN:
            telemetry.limits_unchecked.add(1, {"limit": names})
            return None
        telemetry.limits_refused.add(1, {"limit": names, "reason": "unavailable"})
        raise LimitUnavailableError(names, UNAVAILABLE_RETRY_S)

    def store_recovered(self) -> None:
        """Ask the store again from the next call on (called once a call reached it again)."""
        if self._store_down_until:
            log.info("limits: checking the cluster store again")
        self._store_down_until = 0.0

    def slot(self, source: str) -> AbstractAsyncContextManager[Any]:
        """The source's concurrency slot for the duration of a call (a no-op without a rule)."""
        policy = self._policy
        if not policy.concurrency:
            return NO_SLOT
        rule = policy.concurrency_for(source)
        if rule is None:
            return NO_SLOT
        gate = self._gates.get((rule.name, source))
        if gate is None:
            gate = self._gates[(rule.name, source)] = Gate(rule, self._clock)
        return gate.slot()

    def gate(self, rule: str, source: str) -> Gate | None:
        """The live gate of ``rule`` for ``source`` (status, tests)."""
        return self._gates.get((rule, source))


def _key(rule: RateRule, session_id: str, principal: str, name: str, source: str) -> str:
    # Unit separator: no rule name (pattern-checked) contains it.
    return f"{rule.name}\x1f{rule.scope_value(session_id, principal, name, source)}"
