"""Runtime set: publication, pins, bounded retirement, connection reference counts."""

from __future__ import annotations

import dataclasses

import anyio
import pytest

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.errors import (
    GenerationDrainedError,
    OperationDeadlineError,
    ReconcilerClosedError,
    RevisionUnavailableError,
)
from mcp_reconciler.reconciler.model import EntryKind
from mcp_reconciler.reconciler.runtime import LiveState, Runtime
from tests.support.fakes import FakeConnection, catalog, state

pytestmark = pytest.mark.anyio

WAIT = 5.0  # every wait in these tests is bounded


async def test_I1_published_generation_is_immutable() -> None:
    async with Runtime() as rt:
        rt.publish(catalog(state("a", ["x"], FakeConnection())))
        gen = rt.current.generation  # type: ignore[union-attr]
        with pytest.raises(dataclasses.FrozenInstanceError):
            gen.revision = 9  # type: ignore[misc]
        with pytest.raises(TypeError):
            gen.routes[EntryKind.TOOL]["a__y"] = gen.tools["a__x"]  # type: ignore[index]
        entry = gen.tools["a__x"]
        with pytest.raises(TypeError):
            entry.definition["description"] = "rug pull"  # type: ignore[index]
        with pytest.raises(dataclasses.FrozenInstanceError):
            entry.digest = "0"  # type: ignore[misc]


async def test_I3_digest_equal_candidate_is_discarded() -> None:
    conn = FakeConnection()
    async with Runtime() as rt:
        seen: list[int] = []
        rt.add_listener(lambda new, old: seen.append(new.revision))
        assert rt.publish(catalog(state("a", ["x"], conn))).status == "published"
        result = rt.publish(catalog(state("a", ["x"], conn)))
        assert result.status == "unchanged" and result.revision == 1
        assert seen == [1]  # no downstream notification for the discarded candidate
        assert rt.publish(catalog(state("a", ["x", "y"], conn))).revision == 2
        assert seen == [1, 2]
    assert conn.closes == 1


async def test_I3_revisions_strictly_increase() -> None:
    async with Runtime() as rt:
        revs = [rt.publish(catalog(state("a", [f"t{i}"], FakeConnection()))).revision for i in range(20)]
    assert revs == list(range(1, 21))


async def test_I4_pinned_generation_stays_open_across_publications() -> None:
    old_conn, new_conn = FakeConnection(), FakeConnection()
    async with Runtime() as rt:
        rt.publish(catalog(state("a", ["x"], old_conn)))
        live = rt.current
        assert live is not None
        pin = live.pin()
        rt.publish(catalog(state("a", ["y"], new_conn)))
        assert live.state is LiveState.RETIRING
        assert rt.get(1) is live  # still addressable by revision while pinned
        assert not old_conn.closed
        second = live.pin()  # an explicitly requested retiring revision can still be pinned
        pin.release()
        assert live.state is LiveState.RETIRING and not old_conn.closed
        second.release()
        assert live.state is LiveState.CLOSED
        with pytest.raises(RevisionUnavailableError, match="current revision is 2"):
            live.pin()
        with pytest.raises(RevisionUnavailableError):
            rt.get(1)
        with anyio.fail_after(WAIT):
            while not old_conn.closed:
                await anyio.wait_all_tasks_blocked()
        assert not new_conn.closed


async def test_I4_operation_releases_pin_on_every_exit_path() -> None:
    async with Runtime() as rt:
        rt.publish(catalog(state("a", ["x"], FakeConnection())))
        live = rt.current
        assert live is not None
        async with live.operation():
            assert live.pins == 1
        assert live.pins == 0
        with pytest.raises(ValueError):
            async with live.operation():
                raise ValueError("boom")
        assert live.pins == 0
        with anyio.move_on_after(0):
            async with live.operation():
                await anyio.sleep_forever()
        assert live.pins == 0 and live.operations == 0
        pin = live.pin()
        pin.release()
        pin.release()  # idempotent
        assert live.pins == 0


async def test_I4_shared_connection_is_not_closed_with_old_generation() -> None:
    shared, changed_old, changed_new = FakeConnection("a"), FakeConnection("b"), FakeConnection("b")
    async with Runtime() as rt:
        rt.publish(catalog(state("a", ["x"], shared), state("b", ["y"], changed_old)))
        rt.publish(catalog(state("a", ["x"], shared), state("b", ["z"], changed_new)))
        with anyio.fail_after(WAIT):
            while not changed_old.closed:
                await anyio.wait_all_tasks_blocked()
        assert not shared.closed and not changed_new.closed
        assert rt.connection_refs()[id(shared)] == 1
    assert (shared.closes, changed_old.closes, changed_new.closes) == (1, 1, 1)


async def test_I5_drain_deadline_cancels_operations_with_retryable_error() -> None:
    bounds = Bounds(operation_deadline_s=0.05, drain_grace_s=0.05)
    conn = FakeConnection()
    errors: list[BaseException] = []
    async with Runtime(bounds) as rt:
        rt.publish(catalog(state("a", ["x"], conn)))
        live = rt.current
        assert live is not None
        started = anyio.Event()

        async def slow_call() -> None:
            try:
                async with live.operation():
                    started.set()
                    await anyio.sleep_forever()
            except GenerationDrainedError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow_call)
            with anyio.fail_after(WAIT):
                await started.wait()
            rt.publish(catalog(state("a", ["y"], FakeConnection())))
            assert live.state is LiveState.RETIRING
        assert live.state is LiveState.CLOSED
        assert rt.forced_drains == 1
        assert len(errors) == 1 and errors[0].retryable  # type: ignore[attr-defined]
        assert "revision 1" in str(errors[0])
        with anyio.fail_after(WAIT):
            while not conn.closed:
                await anyio.wait_all_tasks_blocked()


async def test_I5_operation_deadline_is_enforced() -> None:
    async with Runtime() as rt:
        rt.publish(catalog(state("a", ["x"], FakeConnection())))
        live = rt.current
        assert live is not None
        with pytest.raises(OperationDeadlineError):
            async with live.operation(deadline_s=0.01):
                await anyio.sleep_forever()
        assert live.pins == 0


async def test_I5_retiring_is_bounded_and_publication_deferred_then_retried_once() -> None:
    bounds = Bounds(retiring_max=2)
    async with Runtime(bounds) as rt:
        published: list[int] = []
        rt.add_listener(lambda new, old: published.append(new.revision))
        pins = []
        for i in range(3):
            rt.publish(catalog(state("a", [f"t{i}"], FakeConnection())))
            pins.append(rt.current.pin())  # type: ignore[union-attr]
        assert len(rt.retiring) == 2
        deferred_conn = FakeConnection()
        result = rt.publish(catalog(state("a", ["deferred"], deferred_conn)))
        assert result.status == "deferred" and result.revision == 3
        assert len(rt.retiring) == 2 and rt.pending is not None
        newer_conn = FakeConnection()
        assert rt.publish(catalog(state("a", ["newer"], newer_conn))).status == "deferred"
        with anyio.fail_after(WAIT):  # the superseded pending candidate's connection is closed
            while not deferred_conn.closed:
                await anyio.wait_all_tasks_blocked()
        assert published == [1, 2, 3]
        pins[0].release()  # frees a slot: exactly one retry publishes the pending candidate
        assert published == [1, 2, 3, 4]
        assert rt.current.generation.tools.keys() == {"a__newer"}  # type: ignore[union-attr]
        assert rt.pending is None
        assert len(rt.retiring) == 2
        assert rt.deferred_publications == 2
        assert not newer_conn.closed


async def test_I5_unpinned_generation_closes_immediately_on_supersede() -> None:
    conn = FakeConnection()
    async with Runtime() as rt:
        rt.publish(catalog(state("a", ["x"], conn)))
        old = rt.current
        rt.publish(catalog(state("a", ["y"], FakeConnection())))
        assert old is not None and old.state is LiveState.CLOSED
        assert rt.retiring == ()


async def test_I14_close_is_idempotent_concurrent_and_closes_each_connection_once() -> None:
    conns = [FakeConnection() for _ in range(6)]
    rt = Runtime(Bounds(drain_grace_s=0.5))
    cancelled: list[BaseException] = []
    async with rt:
        rt.publish(catalog(state("a", ["x"], conns[0]), state("b", ["y"], conns[1])))
        held = rt.current.pin()  # type: ignore[union-attr]
        rt.publish(catalog(state("a", ["x"], conns[0]), state("b", ["z"], conns[2])))
        started = anyio.Event()

        async def op() -> None:
            try:
                async with rt.current.operation():  # type: ignore[union-attr]
                    started.set()
                    await anyio.sleep_forever()
            except ReconcilerClosedError as exc:  # shutdown, not a drain (retry later, not on this revision)
                cancelled.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(op)
            with anyio.fail_after(WAIT):
                await started.wait()
            tg.start_soon(rt.aclose)
            tg.start_soon(rt.aclose)
        await rt.aclose()
        held.release()
        with pytest.raises(ReconcilerClosedError):
            rt.publish(catalog(state("c", ["q"], conns[3])))
    assert len(cancelled) == 1
    assert [c.closes for c in conns[:4]] == [1, 1, 1, 1]


async def test_I5_many_waiters_for_operations_all_wake() -> None:
    async with Runtime() as rt:
        rt.publish(catalog(state("a", ["x"], FakeConnection())))
        live = rt.current
        assert live is not None
        release = anyio.Event()
        woke: list[str] = []

        async def op() -> None:
            async with live.operation():
                await release.wait()

        async def waiter(name: str) -> None:
            await live.wait_operations_done()
            woke.append(name)

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(op)
                await anyio.wait_all_tasks_blocked()
                tg.start_soon(waiter, "w1")
                tg.start_soon(waiter, "w2")
                await anyio.wait_all_tasks_blocked()
                release.set()
        assert sorted(woke) == ["w1", "w2"]


class SlowConnection(FakeConnection):
    def __init__(self, gate: anyio.Event) -> None:
        super().__init__()
        self.gate = gate
        self.finished = False

    async def aclose(self) -> None:
        self.closes += 1
        await self.gate.wait()
        self.finished = True


async def test_I14_aclose_waits_for_background_connection_closes() -> None:
    gate = anyio.Event()
    slow = SlowConnection(gate)
    async with Runtime() as rt:
        rt.publish(catalog(state("a", ["x"], slow)))
        rt.publish(catalog(state("a", ["y"], FakeConnection())))  # slow closes in the background
        await anyio.wait_all_tasks_blocked()
        assert slow.closes == 1 and not slow.finished
        done = anyio.Event()

        async def close() -> None:
            await rt.aclose()
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(close)
            await anyio.wait_all_tasks_blocked()
            assert not done.is_set()  # aclose has not reported done while an upstream is still closing
            gate.set()
        assert slow.finished and done.is_set()


async def test_I14_publish_after_exit_raises_closed_error() -> None:
    rt = Runtime()
    async with rt:
        pass
    with pytest.raises(ReconcilerClosedError):
        rt.publish(catalog(state("a", ["x"], FakeConnection())))


async def test_I14_closed_runtimes_are_not_kept_alive_by_telemetry() -> None:
    import gc
    import weakref

    refs = []
    for _ in range(3):
        rt = Runtime()
        async with rt:
            rt.publish(catalog(state("a", ["x"], FakeConnection())))
        refs.append(weakref.ref(rt))
    del rt
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
