"""The reconciler over real upstream processes: stdio subprocesses and streamable HTTP on loopback.

Every test drives ``UpstreamReader()`` with its default target factory (real transports from
``reconciler.transports``) and a ``Reconciler`` whose triggers come from the upstreams themselves
(the reader is built with the queue's ``add`` as its sink): list_changed, death detection and health checks. Waits are
bounded (``anyio.fail_after``) and synchronise on publications (a runtime listener) — polling
is used only to wait for an external process (pid/marker files).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
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
from mcp_reconciler.reconciler.throttle import Backoff
from mcp_reconciler.reconciler.upstream import UpstreamConnection, UpstreamReader
from tests.integration.conftest import (
    READY_TIMEOUT_S,
    HttpUpstreams,
    child_pids,
    http_spec,
    read_pid,
    stdio_spec,
    wait_for_file,
)
from tests.support.observe import Publications
from tests.support.upstream_server import CONTROL_TOOLS

pytestmark = pytest.mark.anyio

WAIT = 15.0  # bound on any single wait in this file
FAST = Bounds(cooldown_s=0.0, reconnect_backoff_min_s=0.05, reconnect_backoff_max_s=0.3)
CONTROL = {f"up__{c}" for c in CONTROL_TOOLS}


# -- helpers -------------------------------------------------------------------------------------


@asynccontextmanager
async def engine(
    *specs: SourceSpec,
    bounds: Bounds = FAST,
    reader_bounds: Bounds | None = None,
    **reader_kw: Any,
) -> AsyncIterator[tuple[UpstreamReader, Reconciler, Publications]]:
    """A reader over real transports feeding a reconciler; upstream events trigger it."""
    reader_kw.setdefault("health_interval_s", None)
    reader_kw.setdefault("connect_timeout_s", 5.0)
    queue = new_trigger_queue(bounds)
    async with UpstreamReader(bounds=reader_bounds or bounds, on_dirty=queue.add, **reader_kw) as reader:
        async with Reconciler(StaticDesiredState(list(specs)), reader, bounds=bounds, queue=queue) as rec:
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


async def call(rec: Reconciler, tool: str, args: dict[str, Any] | None = None, source: str = "up") -> dict[str, Any]:
    """One tool call the way the hot path makes it: pin the current generation, forward on the
    source's live connection, release."""
    live = rec.runtime.current
    assert live is not None
    conn = connection(live.generation, source)
    async with live.operation():
        res = await conn.send(
            types.CallToolRequest(params=types.CallToolRequestParams(name=tool, arguments=args or {})),
            types.CallToolResult,
        )
    assert not res.is_error, res
    content = res.content[0]
    assert isinstance(content, types.TextContent)
    return dict(json.loads(content.text))


def tools(gen: Generation) -> set[str]:
    return set(gen.tools) - CONTROL


# -- stdio basics --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_stdio_upstream_is_listed_and_called_on_its_live_connection(mode: str, tmp_path: Path) -> None:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(["alpha", "beta"]))
    pid_file = tmp_path / "up.pid"
    spec = stdio_spec("up", "--tools-file", str(tools_file), "--pid-file", str(pid_file))
    async with engine(spec, mode=mode) as (reader, rec, _pubs):
        out = await rec.refresh(timeout_s=READY_TIMEOUT_S)  # its cycle starts the upstream
        assert out.status == "published" and out.revision == 1
        gen = rec.runtime.current.generation  # type: ignore[union-attr]
        assert tools(gen) == {"up__alpha", "up__beta"}
        assert status(gen) is SourceStatus.READY
        conn = connection(gen)
        assert conn.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        tools_file.write_text(json.dumps(["gamma"]))  # a spawn-snapshot server never rereads it
        reply = await call(rec, "alpha", {"x": "1"})
        assert reply == {
            "tool": "alpha",
            "args": {"x": "1"},
            "pid": await read_pid(pid_file),
            "snapshot": ["alpha", "beta"],
        }
        assert reader.opened == 1


# -- list_changed --------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_I6_upstream_list_changed_publishes_a_new_revision_without_refresh(
    mode: str, transport: str, http_upstreams: HttpUpstreams
) -> None:
    if transport == "stdio":
        spec = stdio_spec("up", "--tools", "a")
    else:
        _proc, port = await http_upstreams.start("--tools", "a")
        spec = http_spec("up", port)
    async with engine(spec, mode=mode) as (reader, rec, pubs):
        gen1 = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY)
        assert tools(gen1) == {"up__a"}
        conn = connection(gen1)
        assert conn.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        cycles_before = rec.cycles

        await call(rec, "set_tools", {"names": ["a", "b"]})

        gen2 = await pubs.wait_for(lambda g: "up__b" in g.tools)
        assert gen2.revision > gen1.revision
        assert tools(gen2) == {"up__a", "up__b"}
        assert rec.cycles > cycles_before  # the upstream's notification triggered the cycle
        assert connection(gen2) is conn  # re-listed over the same session: no reconnect
        assert reader.opened == 1


# -- death detection -----------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["sigkill", "crash_tool"])
async def test_I8_stdio_upstream_killed_mid_call_fails_the_call_and_reconnects_after_backoff(
    how: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "up.pid"
    marker = tmp_path / "blocked"
    spec = stdio_spec("up", "--tools", "echo", "--pid-file", str(pid_file))
    delay_s = 0.5  # deterministic throttle: every delay is exactly the cooldown
    backoff = Backoff(base_s=delay_s, cap_s=delay_s, cooldown_s=delay_s, rand=lambda: 1.0)
    async with engine(spec, backoff=backoff) as (reader, rec, pubs):
        gen1 = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY)
        conn1 = connection(gen1)
        pid1 = await read_pid(pid_file)
        assert (await call(rec, "echo"))["pid"] == pid1
        failures: list[BaseException] = []

        async def blocked_call() -> None:
            try:
                await call(rec, "block", {"marker": str(marker)})
            except Exception as exc:
                failures.append(exc)

        with anyio.fail_after(WAIT):  # the in-flight call must fail, not hang
            async with anyio.create_task_group() as tg:
                tg.start_soon(blocked_call)
                await wait_for_file(marker)  # the upstream is inside the block call
                killed_at = anyio.current_time()
                if how == "sigkill":
                    os.kill(pid1, signal.SIGKILL)
                else:
                    with pytest.raises((MCPError, UpstreamUnavailableError)):  # crash never answers
                        await call(rec, "crash")
        assert len(failures) == 1, "the in-flight call did not fail"
        assert isinstance(failures[0], MCPError | UpstreamUnavailableError), failures  # a clean, typed error
        assert not conn1.alive  # death detected via the transport's stream end

        gen2 = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY and connection(g) is not conn1)
        assert gen2.revision > gen1.revision
        assert reader.opened == 2
        conn2 = connection(gen2)
        assert conn2.connected_at is not None and conn2.connected_at >= killed_at + delay_s  # after backoff (I8)
        between = [g for g in pubs.generations if gen1.revision < g.revision < gen2.revision]
        assert between and all(status(g) is SourceStatus.STALE and tools(g) == {"up__echo"} for g in between)
        assert reader.backoff.failures("up") >= 1  # the short-lived connection counted (I8)
        pid2 = await read_pid(pid_file, not_=pid1)
        reply = await call(rec, "echo")
        assert reply["pid"] == pid2 != pid1


# The legacy health check pings through Client.send_ping, which the SDK flags as deprecated
# (reported; the reconciler could send a raw PingRequest instead).
@pytest.mark.filterwarnings("ignore:ping is removed:mcp.shared.exceptions.MCPDeprecationWarning")
@pytest.mark.parametrize("mode", ["legacy", "auto"])  # health check: ping (2025) / bypass list (2026)
async def test_I2_idle_http_upstream_death_is_found_by_health_check_then_recovers(
    mode: str, http_upstreams: HttpUpstreams
) -> None:
    proc, port = await http_upstreams.start("--tools", "a,b")
    async with engine(http_spec("up", port), health_interval_s=0.2, mode=mode) as (reader, rec, pubs):
        gen1 = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY)
        conn1 = connection(gen1)
        assert tools(gen1) == {"up__a", "up__b"}

        http_upstreams.kill(proc)  # dies while idle: no call in flight notices

        stale = await pubs.wait_for(lambda g: status(g) is SourceStatus.STALE)
        assert not conn1.alive
        assert tools(stale) == {"up__a", "up__b"}  # last-known-good kept (I2)
        state = stale.source_state("up")
        assert state is not None and state.error is not None
        assert str(port) not in state.error and "127.0.0.1" not in state.error  # sanitized (I12)
        assert rec.health.get("up").status == "stale"

        await http_upstreams.start("--tools", "a,b,c", port=port)

        gen3 = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY)
        assert tools(gen3) == {"up__a", "up__b", "up__c"}
        assert connection(gen3) is not conn1 and connection(gen3).alive
        assert gen3.revision > stale.revision > gen1.revision
        assert reader.opened >= 2


# -- throttling ----------------------------------------------------------------------------------


async def test_I8_upstream_dying_in_a_loop_costs_bounded_reconnects() -> None:
    spec = SourceSpec(
        name="up", transport={"kind": "stdio", "command": sys.executable, "args": ["-c", "import sys; sys.exit(1)"]}
    )
    # The reconciler itself runs cycles back to back; only the reader's throttle limits attempts.
    reader_bounds = Bounds(cooldown_s=0.2, reconnect_backoff_min_s=0.1, reconnect_backoff_max_s=1.0)
    window_s = 2.0
    async with engine(spec, bounds=FAST, reader_bounds=reader_bounds) as (reader, rec, pubs):
        await pubs.wait_for(lambda g: status(g) is SourceStatus.FAILED)
        t0 = anyio.current_time()
        attempts0 = reader.backoff.attempts("up")
        cycles0 = rec.cycles
        # A trigger storm on top of the retry timers: each trigger is a chance to reconnect.
        with anyio.move_on_after(window_s):
            while True:
                rec.trigger("up")
                await anyio.sleep(0.01)  # the storm's pace: triggers over a time window are the subject
        elapsed = anyio.current_time() - t0
        attempts = reader.backoff.attempts("up") - attempts0
        gen = rec.runtime.current.generation  # type: ignore[union-attr]
        state = gen.source_state("up")
        health = rec.health.get("up")

    # Attempts are spaced at least by the cooldown (a failure's delay is >= cooldown too).
    bound = math.floor(elapsed / reader_bounds.cooldown_s) + 1
    assert 1 <= attempts <= bound, (attempts, bound)
    assert rec.cycles - cycles0 > 3 * attempts  # many chances, few reconnects
    assert reader.backoff.failures("up") >= attempts
    assert state is not None and state.status is SourceStatus.FAILED and not state.entries
    for text in (state.error or "", health.last_error or ""):
        assert text  # a reason is given ...
        assert sys.executable not in text and "sys.exit" not in text and "python" not in text.lower()  # ... sanitized
    assert health.status == "failed"


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_I6_flooding_list_changed_costs_a_bounded_number_of_cycles(mode: str) -> None:
    bounds = Bounds(cooldown_s=0.2, reconnect_backoff_min_s=0.05, reconnect_backoff_max_s=0.3)
    n = 10_000
    async with engine(stdio_spec("up", "--tools", "a"), bounds=bounds, mode=mode) as (reader, rec, pubs):
        gen1 = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY)
        cycles0, coalesced0, triggers0 = rec.cycles, rec.queue.coalesced, rec.queue.triggers
        t0 = anyio.current_time()
        reply = await call(rec, "flood", {"n": n})
        assert reply["sent"] == n
        # A cycle that started after the flood was delivered settles whatever it left dirty.
        out = await rec.refresh(["up"], timeout_s=WAIT)
        elapsed = anyio.current_time() - t0
        cycles = rec.cycles - cycles0
        triggers = rec.queue.triggers - triggers0
        coalesced = rec.queue.coalesced - coalesced0

    assert out.status == "unchanged" and out.revision == gen1.revision  # nothing changed: no revision (I3)
    assert [g.revision for g in pubs.generations] == [gen1.revision]
    # At most one cycle per cooldown, plus the one in flight and the refresh's own.
    assert 1 <= cycles <= math.ceil(elapsed / bounds.cooldown_s) + 2, (cycles, elapsed)
    assert reader.opened == 1  # a flood never reconnects
    assert cycles * 100 < n
    if mode == "legacy":  # every pushed notification reached the queue, nearly all coalesced
        assert triggers >= n
        assert coalesced >= triggers - cycles - 1
    else:  # the 2026 client dedups pending listen events; whatever arrives is coalesced too
        assert triggers >= 2
        assert coalesced >= triggers - 2 * cycles - 1


# -- pagination bounds ---------------------------------------------------------------------------


async def test_I13_300_single_item_pages_are_all_listed_within_the_page_bound() -> None:
    names = [f"t{i:03d}" for i in range(300)]
    bounds = Bounds(cooldown_s=0.0, pages_per_source=512)
    spec = stdio_spec("up", "--tools", ",".join(names), "--page-size", "1")
    async with engine(spec, bounds=bounds) as (_reader, _rec, pubs):
        gen = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY)
        assert tools(gen) == {f"up__{n}" for n in names}
        assert len(gen.tools) == 300 + len(CONTROL_TOOLS)  # one page per tool: 304 pages <= 512


async def test_I2_listing_over_the_page_bound_fails_the_source_as_a_whole_keeping_lkg() -> None:
    bounds = Bounds(cooldown_s=0.0)
    assert bounds.pages_per_source == 256
    async with engine(stdio_spec("up", "--tools", "a,b", "--page-size", "1"), bounds=bounds) as (reader, rec, pubs):
        gen1 = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY)
        assert tools(gen1) == {"up__a", "up__b"}

        await call(rec, "set_tools", {"names": [f"t{i:03d}" for i in range(300)]})  # 304 pages > 256

        stale = await pubs.wait_for(lambda g: status(g) is SourceStatus.STALE)
        assert tools(stale) == {"up__a", "up__b"}  # last-known-good, never a partial listing
        state = stale.source_state("up")
        assert state is not None and state.error == "listing exceeded 256 pages"
        assert connection(stale) is connection(gen1) and connection(gen1).alive
        assert reader.opened == 1


# -- teardown ------------------------------------------------------------------------------------


async def test_I14_no_upstream_process_outlives_the_engine(tmp_path: Path) -> None:
    pid_files = [tmp_path / f"{n}.pid" for n in ("a", "b", "c")]
    specs = [stdio_spec(n, "--tools", "x", "--pid-file", str(p)) for n, p in zip("abc", pid_files, strict=True)]
    async with engine(*specs) as (reader, rec, pubs):
        gen = await pubs.wait_for(lambda g: all(s.status is SourceStatus.READY for s in g.sources))
        assert {f"{n}__x" for n in "abc"} <= set(gen.tools)
        pids = {await read_pid(p) for p in pid_files}
        assert pids <= child_pids()
        assert reader.open_connections() == 3
    assert reader.open_connections() == 0
    assert rec.runtime.connections_closed == 3
    # stdio_client reaps its process before the reader's exit returns: gone, not zombies.
    assert not pids & child_pids()
