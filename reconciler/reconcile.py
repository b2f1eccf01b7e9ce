"""The reconciler: the single serialized loop that turns triggers into candidates and
publishes them (I2, I3, I6, I7, I14).

One cycle: load the desired state, re-read the dirty sources (concurrently, each bounded by the
cycle timeout), reuse every clean source's state by reference, keep the last-known-good state of
a source that failed (marked stale), merge, and hand the candidate to the runtime, which
publishes it, discards it as unchanged, or defers it.

Wiring flows one way: the trigger queue exists before the reader (whose ``on_dirty`` sink is the
queue's ``add``) and is handed to the Reconciler, which consumes it; nothing is patched in after
construction. :func:`new_trigger_queue` builds the queue a Reconciler expects for its bounds."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

import anyio

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.catalog import Catalog, bounded, merge
from mcp_reconciler.reconciler.desired import DesiredState, DesiredStateSource
from mcp_reconciler.reconciler.errors import (
    CycleFailedError,
    ReconcilerClosedError,
    ReconnectThrottledError,
    SourceReadError,
)
from mcp_reconciler.reconciler.events import Trigger
from mcp_reconciler.reconciler.failure_cause import ConnectTimeoutError, classify
from mcp_reconciler.reconciler.health import HealthBoard
from mcp_reconciler.reconciler.model import SourceSpec, SourceState, SourceStatus
from mcp_reconciler.reconciler.reader import SourceReader
from mcp_reconciler.reconciler.runtime import Runtime
from mcp_reconciler.reconciler.tasks import background_tasks
from mcp_reconciler.reconciler.workqueue import ALL, Batch, TriggerQueue

log = logging.getLogger("mcp_reconciler.reconciler")

READ_CONCURRENCY = 16

#: ``ledger(catalog, floor)``: the cluster-wide revision number for a candidate, by its content
#: (``floor``: the highest number this replica published), or ``None`` when the ledger cannot be
#: reached (``reconciler/cluster/__init__.py::StoreLedger``).
RevisionLedger = Callable[[Catalog, int], Awaitable[int | None]]


@dataclass(frozen=True, slots=True)
class CycleOutcome:
    """What one cycle did, as answered to waiters (I7)."""

    seq: int
    status: Literal["published", "unchanged", "deferred", "failed"]
    revision: int | None
    keys: frozenset[str]
    started_at: float  # wall clock
    finished_at: float
    sources_read: tuple[str, ...] = ()
    sources_failed: tuple[str, ...] = ()
    error: str | None = None

    @property
    def changed(self) -> bool:
        """True when the cycle published a new revision."""
        return self.status == "published"


def new_trigger_queue(bounds: Bounds) -> TriggerQueue[CycleOutcome]:
    """The trigger queue a :class:`Reconciler` with ``bounds`` consumes (cooldown and retry cap
    from the bounds). Create it first: its ``add`` is the sink readers and watchers report to."""
    return TriggerQueue(cooldown_s=bounds.cooldown_s, retry_max_s=bounds.cycle_retry_max_s)


class Reconciler:
    """Consumes the trigger queue, owns the runtime and runs the loop.

    ``async with Reconciler(desired, reader, queue=queue) as rec:`` starts the loop with an
    initial full cycle; leaving the block closes everything exactly once (I14). ``queue``
    (default: a new one from :func:`new_trigger_queue`) is where triggers arrive; whoever
    else should mark sources dirty — the reader, an input watcher — is given ``queue.add``."""

    def __init__(
        self,
        desired: DesiredStateSource,
        reader: SourceReader,
        *,
        bounds: Bounds | None = None,
        queue: TriggerQueue[CycleOutcome] | None = None,
        wall_clock: Callable[[], float] = time.time,
        ledger: RevisionLedger | None = None,
    ) -> None:
        self.bounds = bounds or Bounds()
        self._ledger = ledger
        self._desired = desired
        self._reader = reader
        self._wall = wall_clock
        self.runtime = Runtime(self.bounds, wall_clock=wall_clock)
        self.queue: TriggerQueue[CycleOutcome] = queue if queue is not None else new_trigger_queue(self.bounds)
        self.health = HealthBoard()
        self.last_outcome: CycleOutcome | None = None
        self.last_desired: DesiredState | None = None
        self.cycles = 0
        self._cycle_running = False
        self._cycle_idle = anyio.Event()
        self._cycle_idle.set()
        self._exit = AsyncExitStack()
        self._closing = False
        self._closed = anyio.Event()
        self._desired_listeners: list[Callable[[DesiredState], None]] = []

    def add_desired_listener(self, listener: Callable[[DesiredState], None]) -> Callable[[], None]:
        """Call ``listener(desired)`` synchronously at the end of every cycle that published,
        discarded or deferred its candidate, with the desired state that cycle loaded (for the
        parts of the desired state that are not sources: config-declared sessions). Returns a
        remover. A listener that raises is logged and does not fail the cycle."""
        self._desired_listeners.append(listener)
        return lambda: self._desired_listeners.remove(listener) if listener in self._desired_listeners else None

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Reconciler:
        # Exit runs in reverse: close (shielded), reap the loop, close the runtime, stop exporting pins.
        async with AsyncExitStack() as stack:
            stack.enter_context(telemetry.pin_gauges.observing(self.runtime))
            await stack.enter_async_context(self.runtime)
            tg = await stack.enter_async_context(background_tasks())
            stack.push_async_callback(self._shielded_aclose)
            tg.start_soon(self._loop)
            self.queue.add(ALL, "startup")
            self._exit = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._exit.__aexit__(exc_type, exc, tb)

    async def _shielded_aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.aclose()

    async def aclose(self) -> None:
        """Idempotent, concurrent-safe teardown (I14): stop taking batches, wait for the cycle in
        flight (bounded by the cycle timeout), then close the runtime and every connection once.
        Safe to call from any task; the owner's ``async with`` exit also reaps the loop task."""
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        try:
            self.queue.shutdown()
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(self.bounds.cycle_timeout_s + 1.0):
                    await self._cycle_idle.wait()
                await self.runtime.aclose()
        finally:
            self._closed.set()

    @property
    def closed(self) -> bool:
        """True from the moment teardown starts (``aclose`` called)."""
        return self._closing

    @property
    def reconciling(self) -> bool:
        """True while a cycle is running (between taking a batch and answering its waiters)."""
        return self._cycle_running

    # -- triggers ----------------------------------------------------------------------------

    def trigger(self, key: str = ALL) -> None:
        """Mark a key dirty: a source name, ``"config"`` or ``"all"``. Never blocks."""
        self.queue.add(key)

    async def refresh(
        self, keys: Iterable[str] = (ALL,), *, timeout_s: float | None = None, reason: str = "refresh"
    ) -> CycleOutcome:
        """Reconcile ``keys`` and return the outcome of a cycle that started after this call (I7).
        ``reason`` is recorded as the trigger (``events.TriggerReason``).

        Raises TimeoutError if no such cycle finished in ``timeout_s``; giving up cancels nothing."""
        if self._closing:
            raise ReconcilerClosedError()
        ticket = self.queue.request(keys, reason)
        if timeout_s is None:
            return await ticket.wait()
        with anyio.fail_after(timeout_s):
            return await ticket.wait()

    # -- the loop ----------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            try:
                batch = await self.queue.get()
            except ReconcilerClosedError:
                return
            self._cycle_running = True
            self._cycle_idle = anyio.Event()
            try:
                outcome = await self._cycle(batch)
            finally:
                self._cycle_running = False
                self._cycle_idle.set()
            self.last_outcome = outcome
            self.queue.done(batch, outcome, ok=outcome.status != "failed")

    async def _cycle(self, batch: Batch) -> CycleOutcome:
        started = self._wall()
        t0 = anyio.current_time()
        self.cycles += 1
        completed: list[SourceState] = []
        with telemetry.tracer.start_as_current_span(
            "reconciler.cycle", attributes={"cycle.seq": batch.seq, "cycle.keys": sorted(batch.keys)}
        ) as span:
            try:
                with anyio.fail_after(self.bounds.cycle_timeout_s):
                    outcome = await self._build_and_publish(batch, started, completed)
            except (Exception, TimeoutError) as exc:  # a failed cycle keeps its keys (I6)
                reason = _cycle_failure_reason(exc)
                log.warning(
                    "reconcile cycle %d failed: %s", batch.seq, reason, exc_info=not isinstance(exc, TimeoutError)
                )
                self._discard_orphans(completed)
                span.set_attribute("cycle.status", "failed")
                outcome = CycleOutcome(
                    seq=batch.seq,
                    status="failed",
                    revision=self.runtime.current_revision,
                    keys=batch.keys,
                    started_at=started,
                    finished_at=self._wall(),
                    error=reason,
                )
            span.set_attribute("cycle.status", outcome.status)
            if outcome.revision is not None:
                span.set_attribute("cycle.revision", outcome.revision)
        telemetry.cycles_run.add(1, {"status": outcome.status})
        telemetry.cycle_duration.record(anyio.current_time() - t0)
        return outcome

    async def _build_and_publish(self, batch: Batch, started: float, completed: list[SourceState]) -> CycleOutcome:
        desired = await self._desired.load()
        self.last_desired = desired
        if len(desired.specs) > self.bounds.sources:
            raise CycleFailedError(
                f"the configuration declares {len(desired.specs)} sources, over the bound of "
                f"{self.bounds.sources}; remove sources or raise bounds.sources"
            )
        names = [s.name for s in desired.specs]
        if len(set(names)) != len(names):
            raise CycleFailedError("the configuration declares a source name twice")
        base = self._base_states()
        to_read = [s for s in desired.specs if self._needs_read(s, base.get(s.name), desired, batch.keys)]
        trigger = self._trigger(batch, to_read, base, desired)
        build_started = anyio.current_time()
        with telemetry.tracer.start_as_current_span(
            "reconciler.build", attributes={"build.reads": len(to_read)}
        ) as build_span:
            fresh = await self._read_all(to_read, base, desired, completed)
            states: list[SourceState] = []
            failed: list[str] = []
            for spec in desired.specs:
                state = fresh.get(spec.name, base.get(spec.name))
                assert state is not None
                if spec.name in fresh and state.status is not SourceStatus.READY:
                    failed.append(spec.name)
                states.append(state)
            catalog = merge(
                states,
                bounds=self.bounds,
                built_at=self._wall(),
                reload_mode=desired.reload_mode,
                tracked_files=desired.tracked_files,
                warnings=desired.warnings,
                config_error=desired.config_error,
                curation=desired.curation,
            )
            build_span.set_attribute("build.views", len(catalog.views))
        telemetry.build_duration.record(anyio.current_time() - build_started)
        with telemetry.tracer.start_as_current_span("reconciler.publish"):
            revision: int | None = None
            current = self.runtime.current
            if self._ledger is not None and (current is None or current.generation.digest != catalog.digest):
                # Many replicas: the cluster's ledger numbers content, so revision N is the same
                # catalog on every replica (I3 cluster-wide). None: unreachable, number locally.
                revision = await self._ledger(catalog, self.runtime.last_assigned_revision)
            result = self.runtime.publish(catalog, revision=revision, trigger=trigger)
        for listener in list(self._desired_listeners):
            try:
                listener(desired)
            except Exception:  # a listener must not fail the cycle
                log.exception("desired-state listener failed")
        for diag in catalog.diagnostics:
            log.info("catalog diagnostic [%s] %s", diag.code, diag.message)
        return CycleOutcome(
            seq=batch.seq,
            status=result.status,
            revision=result.revision,
            keys=batch.keys,
            started_at=started,
            finished_at=self._wall(),
            sources_read=tuple(s.name for s in to_read),
            sources_failed=tuple(failed),
        )

    def _base_states(self) -> dict[str, SourceState]:
        """The states new candidates build on: the pending candidate's if one is deferred,
        else the current generation's."""
        catalog: Catalog | None = self.runtime.pending
        if catalog is None and self.runtime.current is not None:
            catalog = self.runtime.current.generation.catalog
        return {s.source: s for s in catalog.sources} if catalog is not None else {}

    @staticmethod
    def _trigger(
        batch: Batch, to_read: Sequence[SourceSpec], base: dict[str, SourceState], desired: DesiredState
    ) -> Trigger:
        """Why this cycle's candidate was built: the batch's reasons and keys, plus every source
        read although its key was not marked because its spec or watched inputs changed on disk
        before the watcher's sweep marked it (a cycle loads the desired state afresh). A source
        re-read only because it is not ready is not a reason: it rides along on every cycle."""
        reasons, keys = set(batch.reasons), set(batch.keys)
        if ALL not in batch.keys:
            for spec in to_read:
                if spec.name in batch.keys:
                    continue
                prev = base.get(spec.name)
                if prev is None or prev.spec_digest != spec.digest:
                    reasons.add("config")
                elif prev.inputs_digest != desired.inputs_digest.get(spec.name, ""):
                    reasons.add("watched_file")
                else:
                    continue
                keys.add(spec.name)
        return Trigger(tuple(sorted(reasons)), tuple(sorted(keys)))

    @staticmethod
    def _needs_read(spec: SourceSpec, prev: SourceState | None, desired: DesiredState, keys: frozenset[str]) -> bool:
        if prev is None or ALL in keys or spec.name in keys:
            return True
        if prev.status is not SourceStatus.READY:
            return True  # a stale/failed source is retried whenever a cycle runs
        return prev.spec_digest != spec.digest or prev.inputs_digest != desired.inputs_digest.get(spec.name, "")

    async def _read_all(
        self,
        specs: Sequence[SourceSpec],
        base: dict[str, SourceState],
        desired: DesiredState,
        completed: list[SourceState],
    ) -> dict[str, SourceState]:
        out: dict[str, SourceState] = {}
        limiter = anyio.CapacityLimiter(READ_CONCURRENCY)
        read_timeout = self.bounds.cycle_timeout_s * 0.9

        async def read_one(spec: SourceSpec) -> None:
            prev = base.get(spec.name)
            inputs = desired.inputs_digest.get(spec.name, "")
            async with limiter:
                try:
                    with anyio.fail_after(read_timeout):
                        state = await self._reader.read(spec, prev, inputs_digest=inputs)
                    completed.append(state)
                    telemetry.source_reads.add(1, {"outcome": "ok"})
                    self.health.ok(spec.name, self._wall(), entries=len(state.entries))
                except Exception as exc:  # SourceReadError, TimeoutError, or anything a reader raised
                    if isinstance(exc, TimeoutError) and not isinstance(exc, ConnectTimeoutError):
                        # The cycle's own read deadline, not the source's connect timeout.
                        exc = _ReadDeadline(read_timeout)
                    reason, detail = _read_failure_reason(exc)
                    cause = classify(exc, spec.transport)
                    now = self._wall()
                    if isinstance(exc, ReconnectThrottledError):
                        # Held back, not failed again: the cause stays the source's last error.
                        telemetry.source_reads.add(1, {"outcome": "throttled"})
                        log.debug("source %s: %s", spec.name, reason)
                        self.health.throttled(spec.name, now)
                        reason = self.health.get(spec.name).last_error or reason
                    else:
                        telemetry.source_reads.add(1, {"outcome": "error"})
                        # The WARNING says what happened; the upstream's own words (paths, hosts,
                        # keys) go to DEBUG only (I12).
                        reason = cause.summary
                        log.warning("source %s: %s [%s]", spec.name, reason, cause.kind)
                        if detail:
                            log.debug("source %s: %s: %s", spec.name, reason, detail)
                        self.health.failed(spec.name, now, reason, cause=cause)
                    if prev is not None and prev.spec_digest == spec.digest and prev.entries:
                        state = prev.marked(SourceStatus.STALE, reason, now)
                    elif prev is not None and prev.spec_digest == spec.digest:
                        state = prev.marked(SourceStatus.FAILED, reason, now)
                    else:
                        state = SourceState(
                            source=spec.name,
                            spec_digest=spec.digest,
                            entries=(),
                            built_at=now,
                            status=SourceStatus.FAILED,
                            error=reason,
                            error_at=now,
                        )
            out[spec.name] = state

        async with anyio.create_task_group() as tg:
            for spec in specs:
                tg.start_soon(read_one, spec)
        return out

    def _discard_orphans(self, states: Iterable[SourceState]) -> None:
        """A failed cycle must not leak connections its completed reads opened."""
        try:
            self.runtime.close_unreferenced(s.connection for s in states if s.connection is not None)
        except ReconcilerClosedError:
            # The runtime's task group is gone (teardown raced the failure): the reader's own
            # teardown closes every connection it opened.
            log.info("failed cycle's new connections left to the reader's teardown")


def _cycle_failure_reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "the reconcile cycle timed out"
    if isinstance(exc, CycleFailedError | ReconcilerClosedError):
        return str(exc)
    return "the reconcile cycle failed; see the operator log"


class _ReadDeadline(ConnectTimeoutError):
    """A source's read ran past the cycle's read deadline (90 % of ``bounds.cycle_timeout_s``)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds, "the reconcile cycle's read deadline, bounds.cycle_timeout_s")


def _read_failure_reason(exc: BaseException) -> tuple[str, str]:
    """(sanitized reason for status/clients, bounded detail for operator logs)."""
    if isinstance(exc, SourceReadError):
        return exc.reason, bounded(exc.detail, 512)
    if isinstance(exc, TimeoutError):
        return "listing timed out", ""
    return "listing failed", bounded(f"{type(exc).__name__}: {exc}", 512)
