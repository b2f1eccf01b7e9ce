"""Revision holds: bounded count, TTL and per-owner limit; a held generation outlives its drain deadline."""

from __future__ import annotations

import anyio
import pytest

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.errors import HoldError, HoldLimitError
from mcp_reconciler.reconciler.holds import HoldRegistry
from mcp_reconciler.reconciler.runtime import Runtime
from tests.support.fakes import FakeConnection, catalog, state

pytestmark = pytest.mark.anyio


async def test_I5_holds_are_bounded_in_count_ttl_and_per_owner() -> None:
    async with Runtime(Bounds(holds=3, holds_per_owner=2, hold_ttl_max_s=10)) as rt:
        rt.publish(catalog(state("a", ["x"], FakeConnection())))
        holds = HoldRegistry(rt)
        with pytest.raises(HoldError):
            holds.create(1, 11)  # TTL N + 1
        holds.create(1, 10, owner="alice", per_owner_limit=True)  # TTL = N
        holds.create(1, 1, owner="alice", per_owner_limit=True)
        with pytest.raises(HoldLimitError, match="an owner may keep at most 2"):
            holds.create(1, 1, owner="alice", per_owner_limit=True)
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
