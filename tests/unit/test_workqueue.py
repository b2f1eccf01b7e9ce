"""Coalescing trigger queue (I6, I7) with a controllable clock."""

from __future__ import annotations

import anyio
import pytest

from mcp_reconciler.reconciler.errors import ReconcilerClosedError
from mcp_reconciler.reconciler.workqueue import TriggerQueue

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_I6_burst_coalesces_into_one_batch() -> None:
    q: TriggerQueue[str] = TriggerQueue(cooldown_s=1.0, clock=Clock())
    for _ in range(10_000):
        q.add("src")
    batch = await q.get()
    assert batch.keys == {"src"} and batch.seq == 1
    assert q.triggers == 10_000 and q.coalesced == 9_999


async def test_I6_trigger_during_batch_causes_exactly_one_more() -> None:
    clock = Clock()
    q: TriggerQueue[str] = TriggerQueue(cooldown_s=1.0, clock=clock)
    q.add("a")
    first = await q.get()
    for _ in range(100):
        q.add("a")  # lands mid-cycle
    q.done(first, "ok", ok=True)
    clock.now = 1.0
    second = await q.get()
    assert second.keys == {"a"} and second.seq == 2
    q.done(second, "ok", ok=True)
    assert q.dirty == frozenset()
    with anyio.move_on_after(0.05):  # nothing else is dirty: no third batch
        await q.get()
        pytest.fail("a third batch ran without a trigger")


async def test_I6_cooldown_spaces_batch_starts() -> None:
    clock = Clock()
    q: TriggerQueue[str] = TriggerQueue(cooldown_s=1.0, clock=clock)
    q.add("a")
    b1 = await q.get()
    q.done(b1, "ok", ok=True)
    q.add("a")
    assert q.next_start_not_before == 1.0
    clock.now = 1.0
    b2 = await q.get()
    assert b2.started_at - b1.started_at >= 1.0


async def test_I6_failed_batch_keeps_its_keys_and_backs_off() -> None:
    clock = Clock()
    q: TriggerQueue[str] = TriggerQueue(cooldown_s=1.0, retry_max_s=30.0, clock=clock, jitter=lambda: 1.0)
    q.add("a")
    q.add("b")
    b1 = await q.get()
    q.done(b1, "failed", ok=False)
    assert q.dirty == {"a", "b"}
    assert q.next_start_not_before == pytest.approx(2.0)  # cooldown * 2^1
    clock.now = 2.0
    b2 = await q.get()
    q.done(b2, "failed", ok=False)
    assert q.next_start_not_before == pytest.approx(6.0)  # 2.0 + 1 * 2^2
    clock.now = 6.0
    b3 = await q.get()
    assert b3.keys == {"a", "b"}
    q.done(b3, "ok", ok=True)
    assert q.dirty == frozenset()


async def test_I7_ticket_answered_by_batch_started_after_request() -> None:
    clock = Clock()
    q: TriggerQueue[str] = TriggerQueue(cooldown_s=0.0, clock=clock)
    q.add("a")
    running = await q.get()  # batch 1 is already running when the request arrives
    ticket = q.request(["a"])
    assert ticket.seq == 2
    results: list[str] = []

    async def waiter() -> None:
        results.append(await ticket.wait())

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        q.done(running, "outcome-1", ok=True)  # must NOT answer the ticket
        await anyio.wait_all_tasks_blocked()
        assert results == []
        nxt = await q.get()
        assert "a" in nxt.keys
        q.done(nxt, "outcome-2", ok=True)
    assert results == ["outcome-2"]


async def test_I7_abandoned_waiter_leaks_nothing_and_cancels_nothing() -> None:
    q: TriggerQueue[str] = TriggerQueue(cooldown_s=0.0, clock=Clock())
    t1 = q.request(["a"])
    t2 = q.request(["a"])
    with anyio.move_on_after(0.01):
        await t1.wait()  # gives up
    assert q.pending_waiter_slots() == 1
    batch = await q.get()
    got: list[str] = []
    async with anyio.create_task_group() as tg:

        async def wait2() -> None:
            got.append(await t2.wait())

        tg.start_soon(wait2)
        await anyio.wait_all_tasks_blocked()
        q.done(batch, "done", ok=True)
    assert got == ["done"]  # the other waiter was unaffected
    assert q.pending_waiter_slots() == 0


async def test_I7_shutdown_releases_waiters() -> None:
    q: TriggerQueue[str] = TriggerQueue()
    ticket = q.request(["a"])
    q.shutdown()
    with pytest.raises(ReconcilerClosedError):
        await ticket.wait()
    with pytest.raises(ReconcilerClosedError):
        await q.get()


async def test_I7_ticket_waited_after_its_batch_finished_gets_its_outcome() -> None:
    q: TriggerQueue[str | None] = TriggerQueue(cooldown_s=0.0, clock=Clock())
    ticket = q.request(["a"])
    batch = await q.get()
    q.done(batch, None, ok=True)  # even a None outcome is an outcome
    assert await ticket.wait() is None
    assert q.pending_waiter_slots() == 0
