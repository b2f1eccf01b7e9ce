"""Refresh over the control API: a burst of requests is coalesced into one cycle (I6), and every
request is answered by a cycle that started after it arrived (I7). A waiter that gives up leaks
nothing and cancels nothing shared."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mcp_reconciler.sdk import RefreshTimeout, wire
from mcp_reconciler.sdk.client import ReconcilerClient
from tests.api.conftest import OPERATOR_TOKEN, WAIT, served_gateway, write_config
from tests.support.waits import until

pytestmark = pytest.mark.anyio

BURST = 10
COOLDOWN_S = 1.5  # a burst that arrives within one cooldown costs exactly one cycle


async def _burst(rc: ReconcilerClient, n: int) -> list[wire.RefreshOut]:
    outs: list[wire.RefreshOut] = []

    async def one() -> None:
        out = await rc.refresh(timeout_s=WAIT)
        assert isinstance(out, wire.RefreshOut)
        outs.append(out)

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(one)
    return outs


async def test_I7_I6_concurrent_refreshes_answered_by_one_cycle(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, gateway={"cooldown_s": COOLDOWN_S})
    async with served_gateway(cfg) as served:
        rec = served.gateway.rec
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            # A cycle just started: the next one may not start before its cooldown ends, so the
            # whole burst below lands before it.
            first = await rc.refresh(timeout_s=WAIT)
            assert isinstance(first, wire.RefreshOut)

            started_before = rec.queue.started
            cycles_before = rec.cycles
            outs = await _burst(rc, BURST)

            assert len(outs) == BURST
            assert {o.cycle for o in outs} == {started_before + 1}  # ONE cycle answered all ten
            assert all(o.cycle > started_before for o in outs)  # ...that started after each request (I7)
            assert rec.cycles - cycles_before == 1  # and it cost exactly one cycle (I6)
            assert len({o.revision for o in outs}) == 1
            assert rec.queue.pending_waiter_slots() == 0


async def test_I7_burst_at_short_cooldown_is_honest(tmp_path: Path) -> None:
    """Without the long cooldown, a burst may straddle a cycle start; still every answer comes
    from a cycle that started after its request, and no cycle is wasted or lost."""
    async with served_gateway(write_config(tmp_path)) as served:
        rec = served.gateway.rec
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            started_before = rec.queue.started
            cycles_before = rec.cycles
            outs = await _burst(rc, BURST)
            cycles = {o.cycle for o in outs}
            assert min(cycles) > started_before
            assert len(cycles) <= rec.cycles - cycles_before <= BURST
            assert all(o.cycle_status in ("unchanged", "published") for o in outs)
            assert rec.queue.pending_waiter_slots() == 0


async def test_I7_waiter_that_gives_up_leaks_nothing(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, gateway={"cooldown_s": COOLDOWN_S})
    async with served_gateway(cfg) as served:
        rec = served.gateway.rec
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            await rc.refresh(timeout_s=WAIT)  # the next cycle is at least a cooldown away
            started = rec.queue.started
            with pytest.raises(RefreshTimeout) as exc:
                await rc.refresh(timeout_s=0.2)
            assert exc.value.status == 504 and exc.value.code == "refresh_timeout"
            # The cycle it asked for still runs (nothing shared was cancelled); then no slot remains.
            await until(lambda: rec.queue.batches_done >= started + 1, what="the abandoned cycle")
            await until(lambda: rec.queue.pending_waiter_slots() == 0, what="waiter slots released")
            assert rec.last_outcome is not None and rec.last_outcome.status != "failed"
