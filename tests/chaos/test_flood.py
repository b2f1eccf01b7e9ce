"""I6/I8 under a list_changed flood: one upstream announces ``tools/list_changed`` ~10,000
times per second for ~5 s. Cycles stay bounded by the cooldown, nothing changed so no revision
is published (I3), the flooding source is never reconnected, a second source keeps answering
with low latency, and the process's memory stays flat."""

from __future__ import annotations

import functools
import json
import math
import time
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp import Client

from mcp_reconciler.api.server import serve_http
from mcp_reconciler.reconciler.upstream import UpstreamReader
from tests.chaos.conftest import WAIT, Outcomes, no_pins, percentile, rss_bytes
from tests.e2e.conftest import all_tools, text_of, upstream_source, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

COOLDOWN_S = 0.2
FLOOD_N = 10_000  # announcements per flood call ...
FLOODS = 5  # ... one call per second for 5 s: ~10,000/s (full scale, as specified)
STEADY_CALLERS = 2  # latency probes, not load: each waits PROBE_PAUSE_S between calls
PROBE_PAUSE_S = 0.02
P99_BOUND_S = 1.0
RSS_GROWTH_BOUND = 50 * 1024 * 1024


@pytest.mark.parametrize("upstream_era", ["auto", "legacy"])
async def test_flood_10k_list_changed_per_second_for_5s(
    upstream_era: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``upstream_era`` is the protocol era of the gateway's own upstream connections. The
    gateway always connects with ``mode="auto"`` (2026-07-28: announcements arrive on a
    ``subscriptions/listen`` stream, where the SDK client coalesces pending events); the
    ``legacy`` case swaps in a reader built with ``mode="legacy"`` (a constructor argument the
    reader supports; nothing else changes) so every one of the 50,000 announcements is pushed as
    its own ``notifications/tools/list_changed`` and reaches the trigger queue."""
    if upstream_era == "legacy":
        monkeypatch.setattr(
            "mcp_reconciler.reconciler.gateway.UpstreamReader", functools.partial(UpstreamReader, mode="legacy")
        )
    cfg = write_config(
        tmp_path,
        sources=[upstream_source("flood", "--tools", "f1"), upstream_source("steady", "--tools", "echo")],
        gateway={"cooldown_s": COOLDOWN_S},
    )
    async with serve_http(cfg, port=0) as served:
        rec = served.gateway.rec
        reader = served.gateway.reader
        assert reader is not None
        rev0 = rec.runtime.current_revision
        opened0 = reader.opened
        async with (
            Client(served.url, mode="legacy", read_timeout_seconds=180) as admin,  # flood calls: 60 s passed at load 13
            Client(served.url, mode="legacy", read_timeout_seconds=WAIT) as steady,
        ):
            await all_tools(admin)
            await all_tools(steady)
            assert all(
                c.protocol_version.startswith("2025") == (upstream_era == "legacy")
                for c in (reader.current("flood"), reader.current("steady"))
                if c is not None and c.protocol_version is not None
            )

            async def echo(label: str) -> types.CallToolResult:
                return await steady.call_tool("steady__echo", {"x": label})

            # Baseline: latency and memory before the flood (after warm-up).
            baseline = Outcomes()
            for k in range(30):
                await baseline.run(f"base-{k}", functools.partial(echo, f"base-{k}"))
            rss0 = rss_bytes()
            rss_max = rss0
            cycles0, triggers0, coalesced0 = rec.cycles, rec.queue.triggers, rec.queue.coalesced
            flooding = anyio.Event()
            floods_done = anyio.Event()
            during = Outcomes()
            sent: list[int] = []

            async def flood_once() -> None:
                reply = await admin.call_tool("flood__flood", {"n": FLOOD_N})
                sent.append(json.loads(text_of(reply))["sent"])

            async def flooder() -> None:
                async with anyio.create_task_group() as floods:
                    for k in range(FLOODS):
                        floods.start_soon(flood_once)
                        flooding.set()
                        if k < FLOODS - 1:
                            await anyio.sleep(1.0)  # the floods' spacing (the load shape)
                floods_done.set()

            async def caller(c: int) -> None:
                await flooding.wait()
                for k in range(10_000):  # bounded; ends with the flood
                    if floods_done.is_set():
                        return
                    await during.run(f"flood-{c}-{k}", functools.partial(echo, f"flood-{c}-{k}"))
                    await anyio.sleep(PROBE_PAUSE_S)  # the callers' pace during the flood (the load shape)

            async def memory() -> None:
                nonlocal rss_max
                while not floods_done.is_set():
                    rss_max = max(rss_max, rss_bytes())
                    await anyio.sleep(0.1)  # the RSS sampling period during the flood (the measure)

            t0 = time.monotonic()
            with anyio.fail_after(180):  # 10 s quiet; 60 s was passed at load 20
                async with anyio.create_task_group() as tg:
                    tg.start_soon(flooder)
                    tg.start_soon(memory)
                    for c in range(STEADY_CALLERS):
                        tg.start_soon(caller, c)
            flood_s = time.monotonic() - t0
            # A cycle that starts now settles whatever the flood left dirty.
            out = await rec.refresh(["flood"], timeout_s=WAIT)
            elapsed = time.monotonic() - t0
            rss_max = max(rss_max, rss_bytes())
            cycles = rec.cycles - cycles0
            triggers = rec.queue.triggers - triggers0
            coalesced = rec.queue.coalesced - coalesced0
        await no_pins(served)

        # Every announcement was sent; the flood ran at about the intended rate.
        assert sent == [FLOOD_N] * FLOODS
        # I6: at most one cycle per cooldown (+ the one in flight and the refresh's own).
        bound = math.ceil(elapsed / COOLDOWN_S) + 2
        assert 1 <= cycles <= bound, (cycles, bound, elapsed)
        assert cycles * 100 < FLOOD_N * FLOODS
        if upstream_era == "legacy":
            # Every pushed notification reached the queue (nothing lost) and nearly all coalesced.
            assert triggers >= FLOOD_N * FLOODS, triggers
            assert coalesced >= triggers - 2 * cycles - 2, (coalesced, triggers, cycles)
        else:
            assert triggers >= 2, triggers
        # I3: nothing changed upstream, so no revision; I8: a flood never reconnects.
        assert out.status == "unchanged" and out.revision == rev0, out
        assert rec.runtime.current_revision == rev0
        assert reader.opened == opened0, (reader.opened, opened0)
        # The other source is unaffected: every call succeeded, with low latency.
        assert len(during) >= 10, f"only {len(during)} calls on the steady source during the flood"
        assert not during.failed, [o.error for o in during.failed][:3]
        for o in during.ok:
            assert json.loads(text_of(o.result))["args"] == {"x": o.label}
        latencies = [o.elapsed for o in during.items]
        p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
        b50 = percentile([o.elapsed for o in baseline.items], 50)
        assert p99 < P99_BOUND_S, (p50, p99)
        growth = rss_max - rss0
        assert growth < RSS_GROWTH_BOUND, f"RSS grew by {growth / 2**20:.1f} MiB"
        print(
            f"\nflood ({upstream_era} upstream era): {sum(sent)} announcements in {flood_s:.1f} s "
            f"({sum(sent) / flood_s:.0f}/s); {triggers} triggers, {coalesced} coalesced, {cycles} cycles in "
            f"{elapsed:.1f} s (bound {bound}); steady source: {len(during)} calls, median {p50 * 1000:.1f} ms, "
            f"p99 {p99 * 1000:.1f} ms (baseline median {b50 * 1000:.1f} ms); RSS {rss0 / 2**20:.0f} MiB, "
            f"max growth {growth / 2**20:.1f} MiB"
        )
