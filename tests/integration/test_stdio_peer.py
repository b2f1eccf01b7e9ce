"""Our stdio channel under its contract (ADR 0025, ``reconciler/peer_contract.py``), against a
real upstream process: bounded while reading, the refused call's exact error, the connection
recovered or recycled, linear reading (CPU asserted loosely: a bound, not a timing), and list
bounds applied while the list is read (the source keeps its last-known-good entries)."""

from __future__ import annotations

import dataclasses

import anyio
import mcp_types as types
import pytest
from mcp import MCPError

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.model import SourceStatus
from mcp_reconciler.reconciler.peer_contract import MESSAGE_BOUND_KEY, MessageBoundError
from tests.integration.conftest import stdio_spec
from tests.integration.test_upstream_transports import FAST, WAIT, call, connection, engine, status
from tests.support.peer_bounds import cpu_s, list_past_entries_per_generation, page_past_bytes_per_candidate

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024


async def big(rec: object, size: int, blocks: int = 1) -> types.CallToolResult:
    live = rec.runtime.current  # type: ignore[attr-defined]
    conn = connection(live.generation)
    async with live.operation():
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name="big", arguments={"bytes": size, "blocks": blocks})
        )
        return await conn.send(request, types.CallToolResult, timeout_s=WAIT)


def text_bytes(result: types.CallToolResult) -> int:
    return sum(len(c.text) for c in result.content if isinstance(c, types.TextContent))


async def test_a_result_over_the_message_bound_fails_its_call_with_the_bound_and_the_connection_keeps_serving() -> None:
    bounds = dataclasses.replace(FAST, upstream_message_bytes=1 * MiB)
    async with engine(stdio_spec("up", "--tools", "a", "--noisy"), bounds=bounds) as (reader, rec, pubs):
        await pubs.wait_for(lambda g: status(g).value == "ready")
        opened = reader.opened
        with pytest.raises(MessageBoundError) as caught:
            await big(rec, 4 * MiB)
        err = caught.value
        assert (err.bound, err.limit) == (MESSAGE_BOUND_KEY, 1 * MiB) and err.size > 1 * MiB
        assert err.error.code == -32020
        assert err.error.message == (
            f"the upstream's answer is larger than limits.upstream_message_bytes ({1 * MiB} bytes; "
            f"refused at {err.size} bytes): ask for less, or raise gateway.limits.upstream_message_bytes"
        )
        assert err.error.data == {
            "code": "upstream_message_too_large",
            "retryable": False,
            "bound": "limits.upstream_message_bytes",
            "limit": 1 * MiB,
            "size": err.size,
        }
        # Recovered at the next newline: the same connection answers the next calls.
        assert text_bytes(await big(rec, MiB // 2)) == MiB // 2
        assert (await call(rec, "a", {"x": "1"}))["tool"] == "a"
        assert reader.opened == opened


@pytest.mark.parametrize("size_mb", [50, 100])
async def test_a_huge_result_is_refused_while_read_at_bounded_cpu(size_mb: int) -> None:
    """50 and 100 MB answers under the default 32 MiB bound: refused while read, the bytes past
    the bound skipped (not kept), CPU far from the SDK reader's 22.5 s for 50 MB."""
    async with engine(stdio_spec("up", "--tools", "a", "--noisy")) as (reader, rec, pubs):
        await pubs.wait_for(lambda g: status(g).value == "ready")
        before = cpu_s()
        with pytest.raises(MessageBoundError) as caught:
            await big(rec, size_mb * 1_000_000)
        assert caught.value.limit == Bounds().upstream_message_bytes == 32 * MiB
        # The upstream is still writing the rest; the connection resynchronises after it.
        assert (await call(rec, "a", {"x": "1"}))["tool"] == "a"
        spent = cpu_s() - before
        assert spent < 5.0, f"{spent:.2f} s of gateway CPU for a refused {size_mb} MB answer"
        assert reader.opened == 1


async def test_a_30_MB_result_within_the_bound_is_delivered_at_linear_cost() -> None:
    async with engine(stdio_spec("up", "--tools", "a", "--noisy")) as (_reader, rec, pubs):
        await pubs.wait_for(lambda g: status(g).value == "ready")
        before = cpu_s()
        result = await big(rec, 30_000_000)
        spent = cpu_s() - before
        assert text_bytes(result) == 30_000_000
        # The SDK's reader took ~7 s here (quadratic); loose bound for a busy 2-core machine.
        assert spent < 4.0, f"{spent:.2f} s of gateway CPU for a 30 MB answer"


async def test_a_line_that_never_ends_is_refused_and_the_connection_recycled() -> None:
    """A line past the bound whose first bytes name no request cannot be attributed: the
    channel ends, the call fails as a lost connection, and the source reconnects."""
    bounds = dataclasses.replace(FAST, upstream_message_bytes=1 * MiB)
    async with engine(stdio_spec("up", "--tools", "a", "--noisy"), bounds=bounds) as (reader, rec, pubs):
        first = await pubs.wait_for(lambda g: status(g).value == "ready")
        live = rec.runtime.current
        assert live is not None
        conn = connection(live.generation)
        request = types.CallToolRequest(params=types.CallToolRequestParams(name="noline", arguments={"bytes": 2 * MiB}))
        with anyio.fail_after(WAIT), pytest.raises(MCPError) as caught:
            async with live.operation():
                await conn.send(request, types.CallToolResult, timeout_s=WAIT)
        assert not isinstance(caught.value, MessageBoundError), repr(caught.value)
        assert caught.value.error.code == types.CONNECTION_CLOSED  # the session's own "Connection closed"
        assert conn.dead
        await pubs.wait_for(lambda g: g.revision > first.revision and status(g) is SourceStatus.READY)
        assert (await call(rec, "a", {"x": "1"}))["tool"] == "a"
        assert reader.opened == 2


async def test_a_list_past_entries_per_generation_stops_being_read_and_the_source_keeps_its_entries() -> None:
    bounds = dataclasses.replace(FAST, entries_per_generation=50)
    spec = stdio_spec("up", "--tools", "a,b", "--page-size", "40")
    async with engine(spec, bounds=bounds) as (_reader, rec, pubs):
        await list_past_entries_per_generation(rec, pubs)


async def test_a_list_page_past_bytes_per_candidate_is_refused_while_read() -> None:
    bounds = dataclasses.replace(FAST, bytes_per_candidate=64 * 1024)
    spec = stdio_spec("up", "--tools", "a,b", "--page-size", "5000")
    async with engine(spec, bounds=bounds) as (_reader, rec, pubs):
        error = await page_past_bytes_per_candidate(rec, pubs)
        assert "bytes_per_candidate" in error and "65536" in error


async def test_a_single_page_past_entries_per_generation_is_refused_before_its_entries_are_validated() -> None:
    """One page of 200 entries against a bound of 50: the channel counts the parsed page's
    entries and answers the list request with the bound's error; the session never builds a
    model of any of them (what stalled the loop for seconds with 100,000 tools)."""
    bounds = dataclasses.replace(FAST, entries_per_generation=50)
    spec = stdio_spec("up", "--tools", "a,b", "--page-size", "1000")
    async with engine(spec, bounds=bounds) as (_reader, rec, pubs):
        good = await pubs.wait_for(lambda g: status(g).value == "ready")
        await call(rec, "set_tools", {"names": [f"t{i}" for i in range(200)]})
        bad = await pubs.wait_for(lambda g: g.revision > good.revision and status(g) is SourceStatus.STALE)
        assert "up__a" in bad.tools and "up__t0" not in bad.tools
        state = bad.source_state("up")
        assert state is not None
        assert state.error == "listing refused while reading: a page passed entries_per_generation (50 entries)"
        assert (await call(rec, "progress", {"n": 0}))["steps"] == 0
