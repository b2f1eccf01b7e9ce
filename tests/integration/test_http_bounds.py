"""``limits.upstream_message_bytes`` on the HTTP fast lane (ADR 0025), against a real streamable
HTTP upstream in both eras: a 2026-07-28 JSON body and a 2025-11-25 SSE event over the bound
fail the call with the bound's error while read (the connection is dropped, never pooled);
within the bound, the answer arrives whole and the pool keeps serving."""

from __future__ import annotations

import dataclasses
import resource

import mcp_types as types
import pytest

from mcp_reconciler.reconciler.peer_contract import MESSAGE_BOUND_KEY, MessageBoundError
from tests.integration.conftest import HttpUpstreams, http_spec
from tests.integration.test_upstream_transports import FAST, WAIT, connection, engine, status

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


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
