"""Bounds on an HTTP source's peer (ADR 0025, ADR 0030), against a real streamable HTTP upstream
in both eras: a 2026-07-28 JSON body and a 2025-11-25 SSE event over
``limits.upstream_message_bytes`` fail the call with the bound's error while read (the
connection is dropped, never pooled); within the bound, the answer arrives whole and the pool
keeps serving. List pages are held to ``bytes_per_candidate`` while read and to
``entries_per_generation`` before any entry is validated; the source keeps its last-known-good
entries. Progress of a call reaches its callback through the same peer."""

from __future__ import annotations

import dataclasses

import mcp_types as types
import pytest

from mcp_reconciler.reconciler.model import SourceStatus
from mcp_reconciler.reconciler.peer_contract import MESSAGE_BOUND_KEY, MessageBoundError
from tests.integration.conftest import HttpUpstreams, http_spec
from tests.integration.test_upstream_transports import FAST, WAIT, call, connection, engine, status
from tests.support.peer_bounds import cpu_s, list_past_entries_per_generation, page_past_bytes_per_candidate

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024


async def big(rec: object, size: int) -> dict[str, object]:
    live = rec.runtime.current  # type: ignore[attr-defined]
    conn = connection(live.generation)
    request = types.CallToolRequest(params=types.CallToolRequestParams(name="big", arguments={"bytes": size}))
    async with live.operation():
        return await conn.send_raw(request, timeout_s=WAIT)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_http_answer_over_the_bound_fails_its_call_with_the_bound(
    mode: str, http_upstreams: HttpUpstreams
) -> None:
    _proc, port = await http_upstreams.start("--tools", "a", "--noisy")
    bounds = dataclasses.replace(FAST, upstream_message_bytes=1 * MiB)
    async with engine(http_spec("up", port), bounds=bounds, mode=mode) as (reader, rec, pubs):
        await pubs.wait_for(lambda g: status(g).value == "ready")
        with pytest.raises(MessageBoundError) as caught:
            await big(rec, 4 * MiB)
        err = caught.value
        assert (err.bound, err.limit, err.error.code) == (MESSAGE_BOUND_KEY, 1 * MiB, -32020)
        assert 1 * MiB < err.size <= 1 * MiB + 64 * 1024  # refused within one read of the bound
        raw = await big(rec, MiB // 2)  # the next call: a fresh pooled connection, whole answer
        assert len(raw["content"][0]["text"]) == MiB // 2  # type: ignore[index]
        assert reader.opened == 1


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_50_MB_http_answer_is_refused_at_bounded_cpu(mode: str, http_upstreams: HttpUpstreams) -> None:
    _proc, port = await http_upstreams.start("--tools", "a", "--noisy")
    async with engine(http_spec("up", port), mode=mode) as (_reader, rec, pubs):
        await pubs.wait_for(lambda g: status(g).value == "ready")
        before = cpu_s()
        with pytest.raises(MessageBoundError) as caught:
            await big(rec, 50_000_000)
        spent = cpu_s() - before
        assert caught.value.limit == 32 * MiB
        assert spent < 5.0, f"{spent:.2f} s of gateway CPU for a refused 50 MB answer"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_30_MB_http_answer_is_delivered_at_linear_cost(mode: str, http_upstreams: HttpUpstreams) -> None:
    """30 MB in one SSE event (legacy) used to be re-joined and re-searched per 64 KiB read."""
    _proc, port = await http_upstreams.start("--tools", "a", "--noisy")
    async with engine(http_spec("up", port), mode=mode) as (_reader, rec, pubs):
        await pubs.wait_for(lambda g: status(g).value == "ready")
        before = cpu_s()
        raw = await big(rec, 30_000_000)
        spent = cpu_s() - before
        assert len(raw["content"][0]["text"]) == 30_000_000  # type: ignore[index]
        assert spent < 4.0, f"{spent:.2f} s of gateway CPU for a 30 MB answer"


# -- list pages over HTTP, bounded while read (ADR 0030) ---------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_http_list_past_entries_per_generation_stops_being_read_and_keeps_its_entries(
    mode: str, http_upstreams: HttpUpstreams
) -> None:
    """200 tools in pages of 40 against a bound of 50: the bound is passed on the second page,
    the third is never asked for; the source keeps its last-known-good entries."""
    _proc, port = await http_upstreams.start("--tools", "a,b", "--page-size", "40")
    bounds = dataclasses.replace(FAST, entries_per_generation=50)
    async with engine(http_spec("up", port), bounds=bounds, mode=mode) as (_reader, rec, pubs):
        good, _bad = await list_past_entries_per_generation(rec, pubs)
        conn = connection(good)
        assert conn.http_peer is not None  # the pages went through the source's peer


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_single_http_page_past_entries_per_generation_is_refused_before_validation(
    mode: str, http_upstreams: HttpUpstreams
) -> None:
    _proc, port = await http_upstreams.start("--tools", "a,b", "--page-size", "1000")
    bounds = dataclasses.replace(FAST, entries_per_generation=50)
    async with engine(http_spec("up", port), bounds=bounds, mode=mode) as (_reader, rec, pubs):
        good = await pubs.wait_for(lambda g: status(g).value == "ready")
        await call(rec, "set_tools", {"names": [f"t{i}" for i in range(200)]})
        bad = await pubs.wait_for(lambda g: g.revision > good.revision and status(g) is SourceStatus.STALE)
        state = bad.source_state("up")
        assert state is not None
        assert state.error == "listing refused while reading: a page passed entries_per_generation (50 entries)"
        assert (await call(rec, "progress", {"n": 0}))["steps"] == 0  # the connection still serves


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_http_list_page_past_bytes_per_candidate_is_refused_while_read(
    mode: str, http_upstreams: HttpUpstreams
) -> None:
    _proc, port = await http_upstreams.start("--tools", "a,b", "--page-size", "5000")
    bounds = dataclasses.replace(FAST, bytes_per_candidate=64 * 1024)
    async with engine(http_spec("up", port), bounds=bounds, mode=mode) as (_reader, rec, pubs):
        error = await page_past_bytes_per_candidate(rec, pubs)
        assert error == "listing refused while reading: a page passed bytes_per_candidate (65536 bytes)"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_progress_of_an_http_call_reaches_its_callback_in_order_before_the_result(
    mode: str, http_upstreams: HttpUpstreams
) -> None:
    _proc, port = await http_upstreams.start("--tools", "a")
    async with engine(http_spec("up", port), mode=mode) as (_reader, rec, pubs):
        await pubs.wait_for(lambda g: status(g).value == "ready")
        live = rec.runtime.current
        assert live is not None
        conn = connection(live.generation)
        seen: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message))

        before = conn.http_peer.poster.exchanges if conn.http_peer is not None else -1
        request = types.CallToolRequest(params=types.CallToolRequestParams(name="progress", arguments={"n": 3}))
        async with live.operation():
            result = await conn.send(request, types.CallToolResult, timeout_s=WAIT, progress_callback=on_progress)
        assert not result.is_error
        assert seen == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]
        assert conn.http_peer is not None and conn.http_peer.poster.exchanges == before + 1
