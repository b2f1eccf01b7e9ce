"""The reconciler over a real SSE upstream (the legacy HTTP+SSE transport) on loopback.

The upstream is ``tests.support.upstream_server --transport sse``, a subprocess owned by the test
(``GET /sse`` event stream + ``POST /messages/``). The reader uses its default target factory, so
the source's transport ``{"kind": "sse", "url": "http://127.0.0.1:PORT/sse"}`` goes through
``reconciler.transports`` and the SDK's ``sse_client``. Triggers come from the upstream itself
(the reader is built with the queue's ``add`` as its sink): list_changed pushed on the event
stream, and death observed as the end of that stream (health checks are off here, so the
stream end alone must be noticed).

SSE is a legacy transport, but a 2.3 server answers both protocol eras on it, so both client modes
are exercised. Every wait is bounded; the autouse ``no_leaked_children`` fixture checks I14.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import MCPError

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.desired import StaticDesiredState
from mcp_reconciler.reconciler.errors import UpstreamUnavailableError
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import SourceSpec, SourceStatus
from mcp_reconciler.reconciler.reconcile import Reconciler, new_trigger_queue
from mcp_reconciler.reconciler.upstream import UpstreamConnection, UpstreamReader
from tests.integration.conftest import SseUpstreams, wait_for_file
from tests.support.observe import Publications
from tests.support.upstream_server import CONTROL_TOOLS

pytestmark = pytest.mark.anyio

WAIT = 15.0  # bound on any single wait in this file
FAST = Bounds(cooldown_s=0.0, reconnect_backoff_min_s=0.05, reconnect_backoff_max_s=0.3)
CONTROL = {f"up__{c}" for c in CONTROL_TOOLS}
ERAS = {"legacy": "2025-11-25", "auto": "2026-07-28"}


# -- fixtures and helpers ------------------------------------------------------------------------


def sse_spec(name: str, port: int) -> SourceSpec:
    return SourceSpec(name=name, transport={"kind": "sse", "url": f"http://127.0.0.1:{port}/sse"})


@asynccontextmanager
async def engine(
    *specs: SourceSpec, **reader_kw: Any
) -> AsyncIterator[tuple[UpstreamReader, Reconciler, Publications]]:
    reader_kw.setdefault("health_interval_s", None)  # death must be seen from the stream's end
    reader_kw.setdefault("connect_timeout_s", 5.0)
    queue = new_trigger_queue(FAST)
    async with UpstreamReader(bounds=FAST, on_dirty=queue.add, **reader_kw) as reader:
        async with Reconciler(StaticDesiredState(list(specs)), reader, bounds=FAST, queue=queue) as rec:
            yield reader, rec, Publications(rec)


def connection(gen: Generation, source: str = "up") -> UpstreamConnection:
    state = gen.source_state(source)
    assert state is not None
    conn = state.connection
    assert isinstance(conn, UpstreamConnection)
    return conn


def status(gen: Generation, source: str = "up") -> SourceStatus:
    state = gen.source_state(source)
    assert state is not None
    return state.status


def tools(gen: Generation) -> set[str]:
    return set(gen.tools) - CONTROL


async def call(rec: Reconciler, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """The hot path: pin the current generation, forward on the source's live connection, release."""
    live = rec.runtime.current
    assert live is not None
    conn = connection(live.generation)
    async with live.operation():
        res = await conn.send(
            types.CallToolRequest(params=types.CallToolRequestParams(name=tool, arguments=args or {})),
            types.CallToolResult,
            timeout_s=WAIT,
        )
    assert not res.is_error, res
    content = res.content[0]
    assert isinstance(content, types.TextContent)
    return dict(json.loads(content.text))


# -- tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sse_upstream_is_listed_and_called_on_its_live_connection(
    mode: str, sse_upstreams: SseUpstreams, tmp_path: Path
) -> None:
    proc, port = await sse_upstreams.start("--tools", "alpha,beta", "--page-size", "2")
    async with engine(sse_spec("up", port), mode=mode) as (reader, rec, pubs):
        gen = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY)
        assert gen.revision == 1
        assert tools(gen) == {"up__alpha", "up__beta"}
        assert len(gen.tools) == 2 + len(CONTROL_TOOLS)  # every page (3 of 2) was listed
        conn = connection(gen)
        assert conn.protocol_version == ERAS[mode]
        assert conn.alive

        reply = await call(rec, "alpha", {"x": "1"})
        assert reply == {"tool": "alpha", "args": {"x": "1"}, "pid": proc.pid, "snapshot": ["alpha", "beta"]}
        live = rec.runtime.current
        assert live is not None and live.pins == 0  # the operation's pin was released
        assert reader.opened == 1 and reader.open_connections() == 1
    assert reader.open_connections() == 0
    assert not conn.alive


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_I6_sse_list_changed_publishes_a_new_revision_without_refresh(
    mode: str, sse_upstreams: SseUpstreams
) -> None:
    _proc, port = await sse_upstreams.start("--tools", "a")
    async with engine(sse_spec("up", port), mode=mode) as (reader, rec, pubs):
        gen1 = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY)
        assert tools(gen1) == {"up__a"}
        conn = connection(gen1)
        assert conn.protocol_version == ERAS[mode]
        cycles_before = rec.cycles

        await call(rec, "set_tools", {"names": ["a", "b", "c"]})

        gen2 = await pubs.wait_for(lambda g: "up__c" in g.tools)
        assert gen2.revision > gen1.revision
        assert tools(gen2) == {"up__a", "up__b", "up__c"}
        assert status(gen2) is SourceStatus.READY
        assert rec.cycles > cycles_before  # the upstream's announcement triggered the cycle
        assert connection(gen2) is conn  # re-listed over the same SSE session: no reconnect
        assert reader.opened == 1

        await call(rec, "set_tools", {"names": ["c"]})  # removals reach the catalog too

        gen3 = await pubs.wait_for(lambda g: "up__a" not in g.tools)
        assert gen3.revision > gen2.revision
        assert tools(gen3) == {"up__c"}
        assert reader.opened == 1


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_I2_killed_sse_upstream_goes_stale_with_last_known_good_then_recovers(
    mode: str, sse_upstreams: SseUpstreams
) -> None:
    proc, port = await sse_upstreams.start("--tools", "a,b")
    async with engine(sse_spec("up", port), mode=mode) as (reader, rec, pubs):
        gen1 = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY)
        conn1 = connection(gen1)
        assert tools(gen1) == {"up__a", "up__b"}

        sse_upstreams.kill(proc)  # SIGKILL while idle: only the event stream's end tells

        stale = await pubs.wait_for(lambda g: status(g) is SourceStatus.STALE)
        assert stale.revision > gen1.revision
        assert not conn1.alive
        assert tools(stale) == {"up__a", "up__b"}  # last-known-good kept (I2)
        state = stale.source_state("up")
        assert state is not None and state.error
        assert str(port) not in state.error and "127.0.0.1" not in state.error  # sanitized (I12)
        assert rec.health.get("up").status == "stale"
        with pytest.raises(UpstreamUnavailableError):  # never a call on a dead connection (I4)
            await call(rec, "a")

        await sse_upstreams.start("--tools", "a,b,c", port=port)  # the retry timer finds it (I8)

        gen3 = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY)
        assert tools(gen3) == {"up__a", "up__b", "up__c"}
        conn3 = connection(gen3)
        assert conn3 is not conn1 and conn3.alive
        assert reader.opened >= 2
        assert (await call(rec, "c"))["tool"] == "c"
        assert reader.open_connections() == 1  # the dead connection was closed, not leaked


async def test_I4_sse_upstream_killed_mid_call_fails_the_call_cleanly(
    sse_upstreams: SseUpstreams, tmp_path: Path
) -> None:
    marker = tmp_path / "blocked"
    proc, port = await sse_upstreams.start("--tools", "a")
    async with engine(sse_spec("up", port), mode="legacy") as (_reader, rec, pubs):
        gen1 = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY)
        failures: list[BaseException] = []

        async def blocked_call() -> None:
            try:
                await call(rec, "block", {"marker": str(marker)})
            except Exception as exc:
                failures.append(exc)

        with anyio.fail_after(WAIT):  # the in-flight call must fail, not hang until its timeout
            async with anyio.create_task_group() as tg:
                tg.start_soon(blocked_call)
                await wait_for_file(marker)  # the upstream is inside the block call
                sse_upstreams.kill(proc)
        assert len(failures) == 1 and isinstance(failures[0], MCPError | UpstreamUnavailableError), failures
        live = rec.runtime.live()
        assert all(lg.pins == 0 for lg in live)  # the failed operation released its pin

        stale = await pubs.wait_for(lambda g: status(g) is SourceStatus.STALE)
        assert tools(stale) == tools(gen1) == {"up__a"}
        assert not connection(gen1).alive
