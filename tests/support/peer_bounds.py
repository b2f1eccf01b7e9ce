"""What the upstream-peer bound tests share whatever carries the bytes (stdio, streamable HTTP;
ADR 0025, ADR 0030): the gateway side's CPU, and the two list-bound scenarios — a list that
passes ``entries_per_generation`` on a later page, a page that passes ``bytes_per_candidate`` —
run the same way on every transport, so each transport's test states only its own setup and the
error text it expects."""

from __future__ import annotations

import resource

from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import SourceStatus
from mcp_reconciler.reconciler.reconcile import Reconciler
from tests.integration.test_upstream_transports import call, status
from tests.support.observe import Publications


def cpu_s() -> float:
    """This process's CPU time (the gateway side; the upstream is another process)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def list_past_entries_per_generation(rec: Reconciler, pubs: Publications) -> tuple[Generation, Generation]:
    """With the source ready (tools ``a``, ``b``; pages of 40; ``entries_per_generation`` 50), the
    upstream grows to 200 tools: the bound is passed on the second page and the third is never
    asked for. Returns the last good generation and the stale one, after checking the source kept
    its last-known-good entries and names the bound."""
    good = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY)
    assert "up__a" in good.tools
    await call(rec, "set_tools", {"names": [f"t{i}" for i in range(200)]})
    bad = await pubs.wait_for(lambda g: g.revision > good.revision and status(g) is SourceStatus.STALE)
    assert "up__a" in bad.tools and "up__t0" not in bad.tools  # last-known-good entries kept
    state = bad.source_state("up")
    assert state is not None and state.error is not None
    assert "entries_per_generation" in state.error and "50" in state.error
    return good, bad


async def page_past_bytes_per_candidate(rec: Reconciler, pubs: Publications) -> str:
    """With the source ready (pages of 5,000; ``bytes_per_candidate`` 64 KiB), the upstream grows
    to 5,000 long names: the page is refused while read, the source keeps its entries, and the
    refused page was an answer like any other — the connection still serves calls. Returns the
    source's error."""
    good = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY)
    await call(rec, "set_tools", {"names": [f"tool_with_a_longer_name_{i}" for i in range(5000)]})
    bad = await pubs.wait_for(lambda g: g.revision > good.revision and status(g) is SourceStatus.STALE)
    assert "up__a" in bad.tools
    state = bad.source_state("up")
    assert state is not None and state.error is not None
    assert (await call(rec, "progress", {"n": 0}))["steps"] == 0
    return state.error
