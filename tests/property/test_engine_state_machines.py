"""Stateful property tests of the engine core: the runtime set (I3, I4, I5, I14) and the trigger
queue (I6, I7).

``RuntimeMachine`` drives a real :class:`Runtime` through random interleavings of publish
(new / shared / digest-equal candidates), pin and release (current or a specific retiring
generation), operations that finish or are cancelled, time passing drain deadlines, and close
(once, twice, concurrently). A small model predicts every transition; after every step the
engine must agree with it and the invariants are checked directly.

``QueueMachine`` drives a :class:`TriggerQueue` on a fake clock through add / request / abandon /
get / done(ok|failed) / shutdown and checks coalescing, cooldown, backoff and honest waiters.

Time is deterministic. The event loop runs in a blocking-portal thread and its clock is
*virtual*: it only moves when a rule advances it. After each rule the loop is run to quiescence
(no ready callback, no due timer, every task blocked), which is a well-defined state because no
timer can fire while the clock stands still; nothing here sleeps and hopes. Every hand-off to
the loop is bounded in real time, so a broken engine fails an assertion instead of hanging.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from anyio.abc import TaskGroup, TaskStatus
from anyio.from_thread import start_blocking_portal
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.catalog import Catalog, make_entry, merge
from mcp_reconciler.reconciler.errors import GenerationDrainedError, ReconcilerClosedError, RevisionUnavailableError
from mcp_reconciler.reconciler.model import EntryKind, SourceSpec, SourceState
from mcp_reconciler.reconciler.pins import Pin
from mcp_reconciler.reconciler.runtime import LiveGeneration, LiveState, Runtime
from mcp_reconciler.reconciler.workqueue import Batch, Ticket, TriggerQueue

REAL_WAIT_S = 5.0  # real-time bound on any single hand-off to the loop (only reached on failure)

MACHINE_SETTINGS = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# -- a deterministic event loop in a thread ----------------------------------------------------


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose clock (``anyio.current_time()``) moves only when told to.

    ``free_run()`` lets it follow real time again; used only when tearing down, so that a broken
    engine waiting on a timeout cannot hang the suite."""

    virtual_now = 0.0
    _free_since: float | None = None

    def time(self) -> float:
        if self._free_since is not None:
            return self.virtual_now + (time.monotonic() - self._free_since)
        return self.virtual_now

    def free_run(self) -> None:
        self._free_since = time.monotonic()


def _task_blocked(task: asyncio.Task[Any]) -> bool:
    if task.done():
        return True
    waiter = task._fut_waiter  # type: ignore[attr-defined]
    return waiter is not None and not waiter.done()


async def quiesce() -> None:
    """Return once nothing on this loop can make progress without the clock moving: no ready
    callback, no due timer, and every other task blocked on an unresolved future."""
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    for _ in range(10_000):
        await asyncio.sleep(0)  # one loop turn: quiescence of the loop is what this looks for
        now = loop.time()
        if (
            not loop._ready  # type: ignore[attr-defined]
            and not any(
                not h.cancelled() and h.when() <= now
                for h in loop._scheduled  # type: ignore[attr-defined]
            )
            and all(_task_blocked(t) for t in asyncio.all_tasks() if t is not me)
        ):
            return
    raise AssertionError("the event loop never quiesced (a task keeps spinning)")


class LoopHarness:
    """One event loop (virtual clock) in a portal thread, shared by all steps of one example."""

    def __init__(self) -> None:
        self._cm = start_blocking_portal("asyncio", {"loop_factory": VirtualClockLoop})
        self.portal = self._cm.__enter__()
        self.loop: VirtualClockLoop = self.portal.call(asyncio.get_running_loop)  # type: ignore[arg-type]

    def run(self, fn: Callable[..., Any], *args: Any, what: str = "step") -> Any:
        """Run ``fn(*args)`` (sync or async) on the loop, then let the loop quiesce."""

        async def step() -> Any:
            result = fn(*args)
            if inspect.isawaitable(result):
                result = await result
            await quiesce()
            return result

        future = self.portal.start_task_soon(step)
        try:
            return future.result(timeout=REAL_WAIT_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise AssertionError(f"{what}: did not complete within {REAL_WAIT_S}s (virtual clock stopped)") from None

    def set_time(self, when: float) -> None:
        def move() -> None:
            assert when >= self.loop.virtual_now
            self.loop.virtual_now = when

        self.run(move, what="advance the virtual clock")

    def close(self) -> None:
        try:
            self.portal.call(self.loop.free_run)
            self.portal.call(self.portal.stop, True)
        except RuntimeError:  # already stopped
            pass
        finally:
            self._cm.__exit__(None, None, None)


# -- RuntimeMachine: I3, I4, I5, I14 ---------------------------------------------------------------

SOURCES = ("alpha", "beta")
SPECS = {name: SourceSpec(name=name) for name in SOURCES}
RUNTIME_BOUNDS = Bounds(retiring_max=2, operation_deadline_s=1.0, drain_grace_s=0.5)
TICK = 0.25  # dyadic, like the deadlines: virtual times compare exactly


class FakeConnection:
    """An upstream connection that records how often it was closed."""

    _ids = itertools.count(1)

    def __init__(self, connection_id: str | None = None) -> None:
        self.connection_id = connection_id or f"conn-{next(self._ids)}"
        self.close_calls = 0
        self.closed = False

    async def aclose(self) -> None:
        self.close_calls += 1
        await anyio.lowlevel.checkpoint()  # closing takes a moment, like a real session
        self.closed = True

    def __repr__(self) -> str:
        return f"<FakeConnection {self.connection_id} closes={self.close_calls}>"


Layout = dict[str, tuple[FakeConnection, int]]  # source -> (connection, content variant)


@dataclass(eq=False)
class Candidate:
    catalog: Catalog
    layout: Layout

    @property
    def conns(self) -> list[FakeConnection]:
        return [conn for conn, _ in self.layout.values()]

    @property
    def content(self) -> dict[str, tuple[str, int]]:
        """What the digest must cover: per source, the connection id and the entries."""
        return {name: (conn.connection_id, variant) for name, (conn, variant) in self.layout.items()}


def build_candidate(layout: Layout) -> Candidate:
    states = []
    for name in SOURCES:
        if name not in layout:
            continue
        conn, variant = layout[name]
        spec = SPECS[name]
        tool = f"tool{variant}"
        entry = make_entry(
            spec,
            EntryKind.TOOL,
            tool,
            {"name": tool, "description": f"variant {variant}", "inputSchema": {"type": "object"}},
        )
        states.append(
            SourceState(source=name, spec_digest=spec.digest, entries=(entry,), built_at=0.0, connection=conn)
        )
    return Candidate(merge(states, bounds=RUNTIME_BOUNDS, built_at=0.0), dict(layout))


@dataclass(eq=False)
class GenRecord:
    revision: int
    candidate: Candidate
    state: LiveState = LiveState.CURRENT
    live: LiveGeneration | None = None
    deadline: float | None = None
    forced: bool = False


@dataclass(eq=False)
class OpRecord:
    rec: GenRecord
    release: anyio.Event | None = None
    scope: anyio.CancelScope | None = None
    running: bool = True  # model: the operation still holds its pin
    expected: str | None = None  # model: "ok" | "cancelled" | "drained" | "closed"
    outcome: str | None = None  # what the operation's task observed
    drained_revision: int | None = None
    saw_closed_connection: bool = False
    saw_closed_generation: bool = False


CONNECTION_CHOICE = st.sampled_from(["current", "pending", "new", "new", "absent"])


class RuntimeMachine(RuleBasedStateMachine):
    """Model-based test of ``Runtime``/``LiveGeneration``; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.h = LoopHarness()
        self.gens: dict[int, GenRecord] = {}
        self.current: GenRecord | None = None
        self.retiring: list[GenRecord] = []
        self.pending: Candidate | None = None
        self.pins: list[tuple[Pin, GenRecord]] = []
        self.ops: list[OpRecord] = []
        self.conns: dict[int, FakeConnection] = {}
        self.next_revision = 1
        self.closed = False
        self.forced = 0
        self.deferred = 0
        self.now = 0.0
        self.steps = 0
        self.closes = 0
        self.expected_publications: list[tuple[int, int | None]] = []
        self.publications: list[tuple[int, int | None]] = []
        self.host_future, (self.rt, self.ops_tg, self.stop) = self.h.portal.start_task(self._host)

    async def _host(self, *, task_status: TaskStatus[tuple[Runtime, TaskGroup, anyio.Event]]) -> None:
        stop = anyio.Event()
        async with anyio.create_task_group() as ops_tg:
            async with Runtime(RUNTIME_BOUNDS) as rt:
                rt.add_listener(
                    lambda new, old: self.publications.append((new.revision, old.revision if old else None))
                )
                task_status.started((rt, ops_tg, stop))
                await stop.wait()

    # -- the model -----------------------------------------------------------------------------

    def _pins(self, rec: GenRecord) -> int:
        return sum(1 for _, r in self.pins if r is rec) + sum(1 for op in self.ops if op.running and op.rec is rec)

    def _open(self) -> list[GenRecord]:
        return [r for r in self.gens.values() if r.state is not LiveState.CLOSED]

    def _closed_gens(self) -> list[GenRecord]:
        return [r for r in self.gens.values() if r.state is LiveState.CLOSED and r.live is not None]

    def _running(self) -> list[OpRecord]:
        return [op for op in self.ops if op.running]

    def _model_install(self, cand: Candidate) -> str:
        cur = self.current
        if cur is not None and cand.catalog.digest == cur.candidate.catalog.digest:
            return "unchanged"
        if cur is not None and self._pins(cur) > 0 and len(self.retiring) >= RUNTIME_BOUNDS.retiring_max:
            self.pending = cand
            self.deferred += 1
            return "deferred"
        rec = GenRecord(revision=self.next_revision, candidate=cand)
        self.next_revision += 1
        self.gens[rec.revision] = rec
        self.expected_publications.append((rec.revision, cur.revision if cur else None))
        self.current = rec
        if cur is not None:
            self._model_supersede(cur)
        return "published"

    def _model_supersede(self, rec: GenRecord) -> None:
        if self._pins(rec) == 0:
            self._model_close(rec)
            return
        rec.state = LiveState.RETIRING
        rec.deadline = self.now + RUNTIME_BOUNDS.drain_deadline_s
        self.retiring.append(rec)

    def _model_close(self, rec: GenRecord) -> None:
        was_retiring = rec in self.retiring
        rec.state = LiveState.CLOSED
        if was_retiring:
            self.retiring.remove(rec)
            if self.pending is not None and not self.closed:
                cand, self.pending = self.pending, None
                event(f"deferred candidate retried when a slot freed: {self._model_install(cand)}")

    def _model_unpinned(self, rec: GenRecord) -> None:
        if rec.state is LiveState.RETIRING and self._pins(rec) == 0:
            event("last pin of a retiring generation released")
            self._model_close(rec)

    def _bind(self) -> None:
        """Attach each newly published model generation to the engine's LiveGeneration."""
        for rec in self.gens.values():
            if rec.live is None:
                assert rec is self.current, f"revision {rec.revision} was published and superseded unseen"
                live = self.rt.current
                assert live is not None and live.revision == rec.revision, (
                    f"I3: engine current is {live!r}, model expects revision {rec.revision}"
                )
                assert live.generation.catalog is rec.candidate.catalog, "I3: current serves another candidate"
                rec.live = live

    # -- rules: publishing ---------------------------------------------------------------------

    def _new_conn(self, connection_id: str | None = None) -> FakeConnection:
        return FakeConnection(connection_id)

    def _publish(self, cand: Candidate) -> None:
        for conn in cand.conns:
            self.conns[id(conn)] = conn
        cur = self.current
        if cur is not None:  # I3: the digest means the content (connection ids + entries)
            assert (cand.catalog.digest == cur.candidate.catalog.digest) == (cand.content == cur.candidate.content)
        before = cur.revision if cur is not None else None
        if self.closed:
            expected = "closed"
        else:
            self.pending = None  # a newer candidate replaces a deferred one
            expected = self._model_install(cand)
        event(f"publish -> {expected}")

        def act() -> Any:
            try:
                return self.rt.publish(cand.catalog)
            except ReconcilerClosedError:
                return "closed"

        result = self.h.run(act, what="publish")
        if expected == "closed":
            assert result == "closed", f"publish after close must raise ReconcilerClosedError, got {result!r}"
        else:
            assert result.status == expected, f"publish: engine {result.status!r}, model {expected!r}"
            if expected == "published":
                assert result.revision == self.current.revision, (  # type: ignore[union-attr]
                    f"I3: published as revision {result.revision}, expected {self.current.revision}"  # type: ignore[union-attr]
                )
                assert before is None or result.revision > before, "I3: revisions must strictly increase"
            else:
                assert result.revision == before, "I3: a discarded or deferred candidate mints no revision"
        self._bind()

    @rule(plan=st.tuples(CONNECTION_CHOICE, st.integers(0, 1), CONNECTION_CHOICE, st.integers(0, 1)))
    def publish(self, plan: tuple[str, int, str, int]) -> None:
        """A candidate whose sources reuse the current (or pending) connection, or get a new one."""
        layout: Layout = {}
        for name, how, variant in ((SOURCES[0], plan[0], plan[1]), (SOURCES[1], plan[2], plan[3])):
            if how == "absent":
                continue
            origin = {"current": self.current.candidate if self.current else None, "pending": self.pending}.get(how)
            if origin is not None and name in origin.layout:
                layout[name] = (origin.layout[name][0], variant)
                event("candidate shares a connection")
            else:
                layout[name] = (self._new_conn(), variant)
        self._publish(build_candidate(layout))

    @precondition(lambda self: self.current is not None and not self.closed)
    @rule(plan=st.tuples(CONNECTION_CHOICE, st.integers(0, 1), CONNECTION_CHOICE, st.integers(0, 1)))
    def pin_current_then_publish(self, plan: tuple[str, int, str, int]) -> None:
        """The busy case: calls are in flight on the current generation when the next one comes.
        Repeated, this fills the retiring set and exercises deferral (I5)."""
        self.pin(0 if self.current is None else self._open().index(self.current), via_get=False)
        self.publish(plan)

    @precondition(lambda self: self.current is not None)
    @rule(fresh_objects=st.booleans())
    def publish_digest_equal_candidate(self, fresh_objects: bool) -> None:
        """Same content as current: with the very same connections, or with new connection objects
        carrying the same ids (those must then be closed, the current ones kept)."""
        assert self.current is not None
        layout = {
            name: (self._new_conn(conn.connection_id) if fresh_objects else conn, variant)
            for name, (conn, variant) in self.current.candidate.layout.items()
        }
        self._publish(build_candidate(layout))

    # -- rules: pins and operations ------------------------------------------------------------

    @precondition(lambda self: self._open())
    @rule(i=st.integers(0, 7), via_get=st.booleans())
    def pin(self, i: int, via_get: bool) -> None:
        """Pin the current generation or a specific retiring one (by revision)."""
        opened = self._open()
        rec = opened[i % len(opened)]
        event(f"pin a {rec.state.value} generation")

        def act() -> Pin:
            live = self.rt.get(rec.revision) if via_get else rec.live
            assert live is rec.live, "Runtime.get must return the live generation of that revision"
            return live.pin()

        self.pins.append((self.h.run(act, what="pin"), rec))

    @precondition(lambda self: self._closed_gens())
    @rule(i=st.integers(0, 7))
    def pin_closed_generation_is_refused(self, i: int) -> None:
        closed = self._closed_gens()
        rec = closed[i % len(closed)]
        live = rec.live
        assert live is not None

        async def act() -> None:
            with pytest.raises(RevisionUnavailableError):
                live.pin()
            with pytest.raises(RevisionUnavailableError):
                self.rt.get(rec.revision)
            with pytest.raises(RevisionUnavailableError):
                async with live.operation():
                    raise AssertionError("I4: an operation started on a closed generation")

        self.h.run(act, what="pin a closed generation")

    @precondition(lambda self: self.pins)
    @rule(i=st.integers(0, 7), twice=st.booleans())
    def release_pin(self, i: int, twice: bool) -> None:
        pin, rec = self.pins.pop(i % len(self.pins))
        self._model_unpinned(rec)

        def act() -> None:
            pin.release()
            if twice:
                pin.release()  # idempotent

        self.h.run(act, what="release a pin")
        self._bind()

    async def _operation(self, op: OpRecord, *, task_status: TaskStatus[None]) -> None:
        op.release = anyio.Event()
        live = op.rec.live
        assert live is not None
        with anyio.CancelScope() as scope:
            op.scope = scope
            try:
                async with live.operation() as operation:
                    assert operation.revision == op.rec.revision
                    task_status.started()
                    await op.release.wait()
                    # The forwarded call happens here: on the generation it pinned, whose
                    # connections must still be open (I4).
                    op.saw_closed_generation = live.is_closed
                    op.saw_closed_connection = any(c.close_calls for c in op.rec.candidate.conns)
                op.outcome = "ok"
            except GenerationDrainedError as exc:
                op.outcome = "drained"
                op.drained_revision = exc.revision
            except ReconcilerClosedError:
                op.outcome = "closed"
            except Exception as exc:  # reported by the I4 invariant, not by the task group
                op.outcome = f"unexpected {type(exc).__name__}: {exc}"
        if scope.cancelled_caught:
            op.outcome = "cancelled"

    @precondition(lambda self: self._open())
    @rule(i=st.integers(0, 7))
    def start_operation(self, i: int) -> None:
        opened = self._open()
        op = OpRecord(rec=opened[i % len(opened)])
        event(f"operation on a {op.rec.state.value} generation")
        self.h.run(self.ops_tg.start, self._operation, op, what="start an operation")
        self.ops.append(op)

    @precondition(lambda self: self._running())
    @rule(i=st.integers(0, 7), cancel=st.booleans())
    def settle_operation(self, i: int, cancel: bool) -> None:
        """An operation completes (result) or its caller cancels it."""
        running = self._running()
        op = running[i % len(running)]
        op.running = False
        op.expected = "cancelled" if cancel else "ok"
        self._model_unpinned(op.rec)
        assert op.release is not None and op.scope is not None
        self.h.run(op.scope.cancel if cancel else op.release.set, what="settle an operation")
        self._bind()

    # -- rules: time and teardown --------------------------------------------------------------

    @rule(to_next_deadline=st.booleans())
    def advance_time(self, to_next_deadline: bool) -> None:
        """Move the virtual clock by a tick, or exactly onto the earliest drain deadline."""
        if to_next_deadline and self.retiring:
            target = min(r.deadline for r in self.retiring)  # type: ignore[type-var]
        else:
            target = self.now + TICK
        self.now = target
        expired = [r for r in self.retiring if r.deadline is not None and r.deadline <= target]
        for rec in expired:
            self.forced += 1
            rec.forced = True
            pins = sum(1 for _, r in self.pins if r is rec)
            ops = [op for op in self._running() if op.rec is rec]
            event(f"forced drain (raw pins: {bool(pins)}, operations: {bool(ops)})")
            for op in ops:
                op.running = False
                op.expected = "drained"
            self._model_close(rec)
        self.h.set_time(target)
        self._bind()

    def _model_aclose(self) -> None:
        self.closed = True
        for op in self._running():
            op.running = False
            op.expected = "closed"  # shutdown says so, not "drained" (which asks to retry)
        for rec in self.gens.values():
            rec.state = LiveState.CLOSED
        self.current = None
        self.retiring = []
        self.pending = None

    @precondition(lambda self: self.steps >= 12 and self.closes < 2)  # most of a run happens before close
    @rule(mode=st.sampled_from(["once", "twice", "concurrently"]))
    def close(self, mode: str) -> None:
        """aclose: idempotent, concurrent-safe; running operations get ReconcilerClosedError."""
        event(f"close {mode}{' (again)' if self.closed else ''}")
        self.closes += 1
        self._model_aclose()

        async def act() -> None:
            if mode == "concurrently":
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self.rt.aclose)
                    tg.start_soon(self.rt.aclose)
            else:
                await self.rt.aclose()
                if mode == "twice":
                    await self.rt.aclose()
            assert self.rt.closed

        self.h.run(act, what="aclose")

    # -- invariants ------------------------------------------------------------------------------
    # They read engine state from the test thread: safe, because between steps the loop is
    # quiescent and the virtual clock stands still, so nothing in the engine can run.

    @invariant()
    def count_steps(self) -> None:
        self.steps += 1

    @invariant()
    def I03_revisions_strictly_increase_and_equal_candidates_are_discarded(self) -> None:
        revisions = [rev for rev, _ in self.publications]
        assert revisions == sorted(set(revisions)), f"I3: revisions not strictly increasing: {revisions}"
        assert self.publications == self.expected_publications, (
            f"I3: publications {self.publications} != expected {self.expected_publications}"
        )
        assert self.rt.current_revision == (self.current.revision if self.current else None)

    @invariant()
    def I04_pins_hold_and_no_operation_runs_on_a_closed_connection(self) -> None:
        for pin, rec in self.pins:
            assert pin.live is rec.live
            if rec.live is not None and rec.live.is_closed:
                assert self.closed or (rec.forced and rec.deadline is not None and self.now >= rec.deadline), (
                    f"I4: revision {rec.revision} closed while a pin is held, before its drain deadline"
                )
        for rec in self.gens.values():
            if rec.live is None:
                continue
            assert rec.live.pins == self._pins(rec), (
                f"revision {rec.revision}: engine pins {rec.live.pins}, model {self._pins(rec)}"
            )
            if not rec.live.is_closed:
                for conn in rec.candidate.conns:
                    assert conn.close_calls == 0, f"I4: {conn!r} closed while revision {rec.revision} is live"
        if self.pending is not None:
            for conn in self.pending.conns:
                assert conn.close_calls == 0, f"I4: {conn!r} of the deferred candidate was closed"
        for op in self.ops:
            if op.running:
                assert op.outcome is None, f"I4: an operation on revision {op.rec.revision} ended: {op.outcome}"
                assert op.rec.live is not None and not op.rec.live.is_closed
            else:
                assert op.outcome == op.expected, (
                    f"operation on revision {op.rec.revision}: outcome {op.outcome!r}, expected {op.expected!r}"
                )
                if op.outcome == "ok":
                    assert not op.saw_closed_generation, "I4: an operation settled on a closed generation"
                    assert not op.saw_closed_connection, "I4: an operation ran on a closed connection"
                if op.outcome == "drained":
                    assert op.drained_revision == op.rec.revision

    @invariant()
    def I05_retirement_is_bounded_in_space_and_time(self) -> None:
        assert len(self.rt.retiring) <= RUNTIME_BOUNDS.retiring_max, f"I5: {len(self.rt.retiring)} retiring"
        assert self.rt.retiring == tuple(r.live for r in self.retiring), (
            f"I5: retiring {self.rt.retiring} != model {[r.revision for r in self.retiring]}"
        )
        for live in self.rt.retiring:
            assert live.drain_deadline is not None and live.drain_deadline > self.now, (
                f"I5: revision {live.revision} still open past its drain deadline"
            )
        for rec in self.gens.values():
            if rec.live is not None:
                assert rec.live.state is rec.state, (
                    f"revision {rec.revision}: engine {rec.live.state.value}, model {rec.state.value}"
                )
                if rec.deadline is not None:
                    assert rec.live.drain_deadline == rec.deadline
        assert self.rt.forced_drains == self.forced, f"I5: forced drains {self.rt.forced_drains} != {self.forced}"
        assert self.rt.deferred_publications == self.deferred
        expected_pending = self.pending.catalog if self.pending is not None else None
        assert self.rt.pending is expected_pending, "I5: the deferred candidate is not the one pending"

    @invariant()
    def I14_each_connection_closes_once_when_unreferenced(self) -> None:
        referenced = {id(c) for r in self.gens.values() if r.state is not LiveState.CLOSED for c in r.candidate.conns}
        if self.pending is not None:
            referenced |= {id(c) for c in self.pending.conns}
        for key, conn in self.conns.items():
            assert conn.close_calls <= 1, f"I14: {conn!r} closed more than once"
            if key not in referenced:
                assert conn.close_calls == 1 and conn.closed, f"I14: unreferenced {conn!r} was not closed"
        if self.closed:
            assert self.rt.current is None and not self.rt.retiring and self.rt.pending is None

    def teardown(self) -> None:
        try:
            if not self.closed:
                self._model_aclose()
            self.h.run(self.stop.set, what="stop")
            try:  # leaving `async with Runtime` closes it
                self.host_future.result(timeout=REAL_WAIT_S)
            except concurrent.futures.TimeoutError:
                raise AssertionError("I14: leaving `async with Runtime` did not finish") from None
            # I14: every connection ever handed to publish was closed exactly once.
            for conn in self.conns.values():
                assert conn.close_calls == 1 and conn.closed, f"I14: {conn!r} after teardown"
            for op in self.ops:
                assert op.outcome == op.expected, f"operation outcome {op.outcome!r} != {op.expected!r}"
        finally:
            self.h.close()


TestI3I4I5I14RuntimeStateMachine = RuntimeMachine.TestCase
TestI3I4I5I14RuntimeStateMachine.settings = MACHINE_SETTINGS


# -- QueueMachine: I6, I7 ----------------------------------------------------------------------------

COOLDOWN_S = 1.0
RETRY_MAX_S = 8.0
KEYS = st.sampled_from(["all", "config", "alpha", "beta"])


@dataclass(eq=False)
class TicketRecord:
    keys: tuple[str, ...]
    requested_step: int
    ticket: Ticket[str] | None = None
    scope: anyio.CancelScope | None = None
    abandoned: bool = False
    done: bool = False
    result: str | None = None  # the batch outcome, or "closed"


@dataclass(frozen=True)
class Start:
    seq: int
    at: float
    step: int


class QueueMachine(RuleBasedStateMachine):
    """Model-based test of ``TriggerQueue`` on a fake clock with ``jitter=lambda: 1.0``."""

    def __init__(self) -> None:
        super().__init__()
        self.h = LoopHarness()
        self.now = 0.0
        self.step = 0
        self.q: TriggerQueue[str] = self.h.run(
            lambda: TriggerQueue(
                cooldown_s=COOLDOWN_S, retry_max_s=RETRY_MAX_S, clock=lambda: self.now, jitter=lambda: 1.0
            )
        )
        self.host_future, (self.tg, self.stop) = self.h.portal.start_task(self._host)
        self.dirty: set[str] = set()
        self.batch: Batch | None = None
        self.started = 0
        self.not_before = float("-inf")
        self.failures = 0
        self.earliest_retry = float("-inf")
        self.starts: list[Start] = []
        self.outcomes: dict[int, str] = {}
        self.added_during_batch: set[str] = set()
        self.tickets: list[TicketRecord] = []
        self.shut = False

    async def _host(self, *, task_status: TaskStatus[tuple[TaskGroup, anyio.Event]]) -> None:
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            task_status.started((tg, stop))
            await stop.wait()
            tg.cancel_scope.cancel()

    async def _waiter(self, rec: TicketRecord, *, task_status: TaskStatus[None]) -> None:
        assert rec.ticket is not None
        with anyio.CancelScope() as scope:
            rec.scope = scope
            task_status.started()  # no checkpoint between here and the ticket's slot lookup
            try:
                rec.result = await rec.ticket.wait()
            except ReconcilerClosedError:
                rec.result = "closed"
        rec.done = True

    def _mark(self, keys: tuple[str, ...]) -> None:
        if self.shut:
            return
        self.dirty |= set(keys)
        if self.batch is not None:
            self.added_during_batch |= set(keys)

    # -- rules -----------------------------------------------------------------------------------

    @rule(key=KEYS)
    def add(self, key: str) -> None:
        self.step += 1
        self._mark((key,))
        self.h.run(self.q.add, key)

    @rule(keys=st.lists(KEYS, min_size=1, max_size=3).map(tuple))
    def request(self, keys: tuple[str, ...]) -> None:
        self.step += 1
        if self.shut:

            def refused() -> None:
                with pytest.raises(ReconcilerClosedError):
                    self.q.request(keys)

            self.h.run(refused)
            return
        rec = TicketRecord(keys=keys, requested_step=self.step)

        async def act() -> None:
            rec.ticket = self.q.request(keys)
            await self.tg.start(self._waiter, rec)

        self.h.run(act, what="request")
        assert rec.ticket is not None
        assert rec.ticket.seq == self.started + 1, "I7: a ticket belongs to the first batch that starts after it"
        self._mark(keys)
        self.tickets.append(rec)
        event(f"request while {'processing' if self.batch else 'idle'}")

    @precondition(lambda self: any(not t.done and not t.abandoned for t in self.tickets))
    @rule(i=st.integers(0, 7))
    def abandon_waiter(self, i: int) -> None:
        """A waiter gives up (timeout / cancel): it must leak nothing and cancel nothing shared."""
        self.step += 1
        waiting = [t for t in self.tickets if not t.done and not t.abandoned]
        rec = waiting[i % len(waiting)]
        rec.abandoned = True
        event("waiter abandoned")
        assert rec.scope is not None
        self.h.run(rec.scope.cancel, what="abandon a waiter")
        assert rec.done and rec.result is None

    @precondition(
        # allowed exactly when the queue says so: keys dirty and the clock past its next start
        lambda self: not self.shut and self.batch is None and self.q.dirty and self.now >= self.q.next_start_not_before
    )
    @rule()
    def take_batch(self) -> None:
        self.step += 1
        batch: Batch = self.h.run(self.q.get, what="get (allowed: dirty and past next_start_not_before)")
        assert batch.seq == self.started + 1
        assert batch.keys == frozenset(self.dirty), f"I6: batch {set(batch.keys)} != dirty {self.dirty}"
        assert self.added_during_batch <= batch.keys, "I6: a trigger that arrived during a batch was lost"
        assert batch.started_at == self.now
        if self.starts:
            gap = batch.started_at - self.starts[-1].at
            assert gap >= COOLDOWN_S, f"I6: batch starts only {gap} apart"
        assert batch.started_at >= self.earliest_retry, "I6: a failed batch was retried before its backoff"
        for rec in self.tickets:
            if rec.ticket is not None and rec.ticket.seq == batch.seq:
                assert rec.requested_step < self.step, "I7: ticket answered by a batch that started before it"
                assert not self.starts or rec.requested_step > self.starts[-1].step
        self.started += 1
        self.batch = batch
        self.dirty = set()
        self.added_during_batch = set()
        self.not_before = self.now + COOLDOWN_S
        self.starts.append(Start(batch.seq, self.now, self.step))
        event(f"batch of {len(batch.keys)} keys")

    @precondition(lambda self: not self.shut and self.batch is not None)
    @rule()
    def get_is_refused_while_a_batch_processes(self) -> None:
        async def act() -> None:
            with pytest.raises(RuntimeError):
                await self.q.get()

        self.h.run(act)

    @rule(dt=st.sampled_from([0.25, 0.5, 1.0, 2.0]), to_not_before=st.booleans())
    def advance_clock(self, dt: float, to_not_before: bool) -> None:
        self.step += 1
        if to_not_before and self.now < self.not_before:
            self.now = self.not_before
        else:
            self.now += dt

    @precondition(lambda self: self.batch is not None)
    @rule(ok=st.booleans())
    def finish_batch(self, ok: bool) -> None:
        self.step += 1
        batch = self.batch
        assert batch is not None
        outcome = f"batch-{batch.seq}-{'ok' if ok else 'failed'}"
        self.outcomes[batch.seq] = outcome
        self.batch = None
        if ok:
            self.failures = 0
        else:
            self.failures += 1
            self.dirty |= set(batch.keys)  # I6: a failed batch keeps its keys
            backoff = min(RETRY_MAX_S, COOLDOWN_S * 2**self.failures)
            self.not_before = max(self.not_before, self.now + backoff)
            self.earliest_retry = self.now + backoff
        event(f"batch {'ok' if ok else 'failed'}")
        self.h.run(lambda: self.q.done(batch, outcome, ok=ok), what="done")
        for rec in self.tickets:
            if rec.ticket is not None and rec.ticket.seq == batch.seq and not rec.abandoned and not self.shut:
                assert rec.done and rec.result == outcome, f"I7: waiter of batch {batch.seq} got {rec.result!r}"

    @precondition(lambda self: not self.shut and len(self.starts) >= 3)
    @rule()
    def shutdown(self) -> None:
        self.step += 1
        self.shut = True
        event("shutdown")
        self.h.run(self.q.shutdown)
        for rec in self.tickets:
            if not rec.abandoned and rec.ticket is not None and rec.ticket.seq not in self.outcomes:
                assert rec.done and rec.result == "closed", "shutdown must release every waiter"

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def I06_coalescing_keeps_every_dirty_key_and_one_batch(self) -> None:
        assert self.q.dirty == frozenset(self.dirty), f"I6: dirty {set(self.q.dirty)} != model {self.dirty}"
        assert self.q.processing == (self.batch.keys if self.batch is not None else None)
        assert self.q.started == self.started
        assert self.q.next_start_not_before == self.not_before, "I6: cooldown/backoff schedule differs"

    @invariant()
    def I07_waiters_are_honest_and_leak_nothing(self) -> None:
        starts = {s.seq: s for s in self.starts}
        for rec in self.tickets:
            assert rec.ticket is not None
            seq = rec.ticket.seq
            if seq in starts:
                assert starts[seq].step > rec.requested_step, "I7: answered by a batch that started before"
            if rec.abandoned:
                assert rec.done and rec.result is None
            elif seq in self.outcomes and not (self.shut and rec.result == "closed"):
                assert rec.done and rec.result == self.outcomes[seq], (
                    f"I7: ticket {seq} got {rec.result!r}, its batch returned {self.outcomes[seq]!r}"
                )
            elif self.shut:
                assert rec.done and rec.result == "closed"
            else:
                assert not rec.done, f"I7: ticket {seq} answered before its batch finished ({rec.result!r})"
        unfinished = {t.ticket.seq for t in self.tickets if t.ticket is not None and t.ticket.seq not in self.outcomes}
        expected_slots = 0 if self.shut else len(unfinished)
        assert self.q.pending_waiter_slots() == expected_slots, (
            f"I7: {self.q.pending_waiter_slots()} waiter slots, expected {expected_slots}"
        )

    def teardown(self) -> None:
        try:
            self.h.run(self.stop.set, what="stop")
            self.host_future.result(timeout=REAL_WAIT_S)
        finally:
            self.h.close()


TestI6I7QueueStateMachine = QueueMachine.TestCase
TestI6I7QueueStateMachine.settings = MACHINE_SETTINGS
