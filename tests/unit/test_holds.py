"""Revision holds: bounded count, TTL and per-owner limit; a held generation outlives its drain deadline."""

from __future__ import annotations

import anyio
import pytest

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.errors import HoldError, HoldLimitError, HoldSlotsError
from mcp_reconciler.reconciler.holds import HoldRegistry
from mcp_reconciler.reconciler.runtime import Runtime
from tests.support.fakes import FakeConnection, catalog, state

pytestmark = pytest.mark.anyio


async def test_I5_holds_are_bounded_in_count_ttl_and_per_owner() -> None:
    async with Runtime(Bounds(holds=3, holds_per_owner=2, holds_operator_reserve=0, hold_ttl_max_s=10)) as rt:
        rt.publish(catalog(state("a", ["x"], FakeConnection())))
        holds = HoldRegistry(rt)
        with pytest.raises(HoldError):
            holds.create(1, 11)  # TTL N + 1
        holds.create(1, 10, owner="alice", operator=False)  # TTL = N
        holds.create(1, 1, owner="alice", operator=False)
        with pytest.raises(HoldLimitError, match="a principal may hold at most 2"):
            holds.create(1, 1, owner="alice", operator=False)
        holds.create(1, 1, owner="operator")
        with pytest.raises(HoldLimitError, match="at most 3"):
            holds.create(1, 1, owner="operator")
        holds.release_all()
        assert rt.current.pins == 0  # type: ignore[union-attr]


async def test_I5_hold_extends_drain_and_expiry_retires() -> None:
    bounds = Bounds(operation_deadline_s=0.01, drain_grace_s=0.01)
    async with Runtime(bounds) as rt:
        rt.publish(catalog(state("a", ["x"], FakeConnection())))
        holds = HoldRegistry(rt)
        async with anyio.create_task_group() as tg:
            await tg.start(holds.run)
            old = rt.current
            holds.create(1, 0.3)
            rt.publish(catalog(state("a", ["y"], FakeConnection())))
            assert old is not None and old.state.value == "retiring"
            with anyio.move_on_after(0.15):  # well past the 0.02 s drain deadline, before the hold expires
                await old._closed_event.wait()
            assert old.state.value == "retiring" and rt.get(1) is old  # the hold kept it callable
            with anyio.fail_after(5):
                await old._closed_event.wait()  # the hold expired: its pin released, the generation drained
            assert rt.forced_drains == 0 and old.pins == 0
            tg.cancel_scope.cancel()


async def test_I5_holds_cannot_fill_the_retiring_set_so_they_never_defer_publication() -> None:
    # retiring_max 3: holds may keep at most 2 revisions alive, whatever their TTLs.
    async with Runtime(Bounds(retiring_max=3)) as rt:
        holds = HoldRegistry(rt)
        assert holds.max_held_revisions == 2
        rt.publish(catalog(state("a", ["v1"], FakeConnection())))
        holds.create(1, 3600, owner="owner::alice", operator=False)
        rt.publish(catalog(state("a", ["v2"], FakeConnection())))
        holds.create(2, 3600, owner="owner::alice", operator=False)  # N = 2 held revisions
        rt.publish(catalog(state("a", ["v3"], FakeConnection())))
        with pytest.raises(HoldSlotsError, match=r"at most 2 revisions alive \(retiring_max 3 - 1\)") as refused:
            holds.create(3, 3600, owner="owner::bob", operator=False)  # N + 1: refused
        assert refused.value.retryable and refused.value.code == "hold_slots_full"
        holds.create(1, 60, owner="owner::bob", operator=False)  # a held revision may be held again

        # The current revision is busy (an operation) at every publication: the held revisions
        # never take the last retiring slot, so publications keep happening.
        for i in range(4, 8):
            busy = rt.current.pin()  # type: ignore[union-attr]
            result = rt.publish(catalog(state("a", [f"v{i}"], FakeConnection())))
            assert result.status == "published", (i, result)
            busy.release()
            assert rt.pending is None
        assert {1, 2} <= {live.revision for live in rt.live()} and len(rt.retiring) <= 3
        holds.release_all()

    # retiring_max 1 leaves no slot to spare: holds are refused, with the reason.
    async with Runtime(Bounds(retiring_max=1)) as rt:
        rt.publish(catalog(state("a", ["x"], FakeConnection())))
        with pytest.raises(HoldSlotsError, match="retiring_max of at least 2"):
            HoldRegistry(rt).create(1, 10)
