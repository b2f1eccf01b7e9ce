"""Upstreams that die or hang under load: in-flight calls end with the sanitized, retryable
error of their kind within a bound (never a hang, never upstream text: I12), their pins are
released, superseded generations retire within their drain deadline (I5), and the gateway
keeps serving (the source returns as a new process / on a new connection)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError

from mcp_reconciler.api.frontdoor import REVISION_META
from mcp_reconciler.api.server import serve_http
from mcp_reconciler.reconciler.errors import RevisionUnavailableError
from mcp_reconciler.reconciler.model import SourceStatus
from tests.chaos.conftest import (
    WAIT,
    Outcomes,
    assert_sanitized,
    no_pins,
    percentile,
    pid_alive,
)
from tests.e2e.conftest import all_tools, upstream_source, write_config
from tests.integration.conftest import HttpUpstreams, read_pid
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MODES = ("legacy", "auto")


async def _wait_files(paths: list[Path], timeout_s: float = WAIT, at_least: int | None = None) -> None:
    """Bounded wait until every file (or ``at_least`` of them) exists: the upstream is inside
    that many calls."""
    need = len(paths) if at_least is None else at_least
    await until(lambda: sum(p.exists() for p in paths) >= need, what=f"{need} marker files", timeout_s=timeout_s)


async def _call_until_ok(client: Client, name: str, args: dict[str, Any], timeout_s: float = WAIT) -> Any:
    """Retry a call on the retryable "upstream unavailable" until it succeeds (bounded)."""
    with anyio.fail_after(timeout_s):
        while True:
            try:
                return await client.call_tool(name, args)
            except MCPError as exc:
                assert_sanitized(exc, {-32015})
                await anyio.sleep(0.1)  # the pace of retries (each is a real attempt), bounded above


# -- kill -9 under load ---------------------------------------------------------------------------

CONCURRENT = 100  # 10 sessions (5 per protocol era) x 10 calls each, all held in flight
CLIENTS = 10
FAIL_WITHIN_S = 10.0  # each in-flight call must fail this soon after the kill


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_kill_9_upstream_during_100_concurrent_calls(
    transport: str, tmp_path: Path, http_upstreams: HttpUpstreams
) -> None:
    pid_file = tmp_path / "up.pid"
    proc: Any = None
    if transport == "stdio":
        source = upstream_source("up", "--tools", "echo", "--pid-file", str(pid_file))
    else:
        proc, port = await http_upstreams.start("--tools", "echo")
        source = {"name": "up", "http": {"url": f"http://127.0.0.1:{port}/mcp"}}
    cfg = write_config(tmp_path, sources=[source], gateway={"cooldown_s": 0.05})
    async with serve_http(cfg, port=0) as served:
        runtime = served.gateway.rec.runtime
        reader = served.gateway.reader
        assert reader is not None
        rev1 = runtime.current_revision
        assert rev1 is not None
        pid1 = await read_pid(pid_file) if transport == "stdio" else proc.pid
        markers = [tmp_path / f"in-flight-{i}" for i in range(CONCURRENT)]
        outcomes = Outcomes()
        killed_at = 0.0
        per_client = CONCURRENT // CLIENTS

        async def client_task(c: int) -> None:
            async with Client(served.url, mode=MODES[c % 2], read_timeout_seconds=WAIT + 10) as client:
                await all_tools(client)
                async with anyio.create_task_group() as calls:
                    for k in range(per_client):
                        i = c * per_client + k

                        async def blocked(i: int = i) -> types.CallToolResult:
                            return await client.call_tool("up__block", {"marker": str(markers[i])})

                        calls.start_soon(outcomes.run, f"block-{i}", blocked)

        with anyio.fail_after(WAIT + FAIL_WITHIN_S):
            async with anyio.create_task_group() as tg:
                for c in range(CLIENTS):
                    tg.start_soon(client_task, c)
                # All 100 calls are inside the upstream. Over HTTP at most 99 are: the gateway's
                # upstream client is an httpx2 client with the default pool of 100 connections and
                # the new-era listen stream holds one, so the 100th call waits for a pool slot
                # (reported as a finding; the queued call must still fail cleanly below).
                await _wait_files(markers, at_least=CONCURRENT if transport == "stdio" else CONCURRENT - 1)
                assert runtime.current is not None and runtime.current.pins == CONCURRENT
                killed_at = time.monotonic()
                os.kill(pid1, signal.SIGKILL)
                if proc is not None:
                    proc.wait(timeout=5)  # reap our own child (the HTTP upstream is the test's)

        # Nothing lost: every call ended, each with the sanitized, retryable -32015, in time.
        assert len(outcomes) == CONCURRENT
        assert not outcomes.ok, [o.label for o in outcomes.ok][:5]
        for o in outcomes.failed:
            assert isinstance(o.error, MCPError), f"{o.label}: {o.error!r}"
            assert_sanitized(o.error, {-32015})
            assert o.error.error.message == "upstream unavailable; retry later"
            assert o.error.error.data["code"] == "upstream_unavailable"
            assert o.error.error.data.get("revision") == rev1
        fail_after_kill = [o.ended - killed_at for o in outcomes.items]
        assert max(fail_after_kill) < FAIL_WITHIN_S, max(fail_after_kill)
        await no_pins(served)

        # The gateway stays up; the source comes back (stdio: respawned by its supervisor after
        # the reconnect backoff; http: the test restarts the server on the same port).
        if proc is not None:
            await http_upstreams.start("--tools", "echo", port=port)
        async with Client(served.url, mode="auto", read_timeout_seconds=WAIT) as client:
            await all_tools(client)
            result = await _call_until_ok(client, "up__echo", {"x": "after"})
        body = json.loads(result.content[0].text)
        assert body["args"] == {"x": "after"}
        rev_after = (result.meta or {}).get(REVISION_META)
        assert isinstance(rev_after, int) and rev_after > rev1
        if transport == "stdio":
            pid2 = await read_pid(pid_file, not_=pid1)
            assert body["pid"] == pid2 != pid1
        else:
            assert body["pid"] != pid1
        assert not pid_alive(pid1)
        live = runtime.current
        assert live is not None
        state = live.generation.source_state("up")
        assert state is not None and state.status is SourceStatus.READY
        assert reader.opened >= 2
        await no_pins(served)
        await until(
            lambda: reader.open_connections() == 1,
            what="the dead connection was closed once its generations retired",
            timeout_s=WAIT,
        )
        print(
            f"\n{transport}: {CONCURRENT} in-flight calls failed -32015 within "
            f"median {percentile(fail_after_kill, 50) * 1000:.0f} ms / max {max(fail_after_kill) * 1000:.0f} ms "
            f"of the kill; revision {rev1} -> {rev_after}; connections opened {reader.opened}"
        )


# -- hanging upstream -----------------------------------------------------------------------------

HANGING = 10
DEADLINE_S = 1.0


async def test_hanging_upstream_calls_time_out_and_generation_retires(tmp_path: Path) -> None:
    """``operation_deadline_s: 1.0``: calls to a tool that never answers end with -32014 after
    about a second, the upstream sees each cancellation, pins drop to zero, and a generation
    superseded while such calls were in flight closes within its drain deadline (operation
    deadline + ``Bounds.drain_grace_s``, 5 s by default: not configurable from the YAML, so the
    bounded wait below allows 1 + 5 s; in practice it closes as soon as its calls time out)."""
    cfg = write_config(tmp_path, tools=("a",), gateway={"cooldown_s": 0.05, "operation_deadline_s": DEADLINE_S})
    async with serve_http(cfg, port=0) as served:
        runtime = served.gateway.rec.runtime
        bounds = served.gateway.rec.bounds
        assert bounds.operation_deadline_s == DEADLINE_S
        drain_deadline_s = bounds.drain_deadline_s  # 1 + 5 s

        async def hang(phase: str, on_in_flight: Any = None) -> Outcomes:
            markers = [tmp_path / f"{phase}-in-{i}" for i in range(HANGING)]
            cancelled = [tmp_path / f"{phase}-cancelled-{i}" for i in range(HANGING)]
            outcomes = Outcomes()

            async def one(client: Client, i: int) -> None:
                async def call() -> types.CallToolResult:
                    return await client.call_tool(
                        "up__block", {"marker": str(markers[i]), "cancelled": str(cancelled[i])}
                    )

                await outcomes.run(f"{phase}-{i}", call)

            with anyio.fail_after(WAIT):
                async with (
                    Client(served.url, mode="legacy", read_timeout_seconds=WAIT) as legacy,
                    Client(served.url, mode="auto", read_timeout_seconds=WAIT) as auto,
                ):
                    await all_tools(legacy)
                    await all_tools(auto)
                    async with anyio.create_task_group() as tg:
                        for i in range(HANGING):
                            tg.start_soon(one, legacy if i % 2 == 0 else auto, i)
                        await _wait_files(markers)
                        if on_in_flight is not None:
                            await on_in_flight(legacy)
            # Every call timed out at its deadline, with the sanitized, retryable -32014 ...
            assert len(outcomes) == HANGING and not outcomes.ok
            for o in outcomes.failed:
                assert isinstance(o.error, MCPError), f"{o.label}: {o.error!r}"
                assert_sanitized(o.error, {-32014})
                assert o.error.error.data["code"] == "deadline_exceeded"
                assert DEADLINE_S * 0.9 <= o.elapsed < DEADLINE_S + 3.0, o.elapsed
            # ... and the upstream saw each cancellation (nothing keeps hanging upstream).
            await _wait_files(cancelled, timeout_s=5.0)
            return outcomes

        # Phase 1: on the current generation; pins are released when the calls time out.
        rev1 = runtime.current_revision
        assert rev1 is not None
        await hang("p1")
        await no_pins(served, timeout_s=2.0)
        assert runtime.current is not None and runtime.current.revision == rev1 and runtime.current.pins == 0

        # Phase 2: a new generation publishes while HANGING calls pin rev1.
        published: dict[str, float] = {}

        async def publish_new(admin: Client) -> None:
            await admin.call_tool("up__set_tools", {"names": ["a", "b"]})
            await until(
                lambda: (runtime.current_revision or 0) > rev1,
                what=f"a revision after {rev1}",
                timeout_s=WAIT,
            )
            published["at"] = time.monotonic()
            old = runtime.get(rev1)  # still live: retiring under its pins
            assert old.pins == HANGING and old.superseded_at is not None
            assert old in runtime.retiring

        await hang("p2", publish_new)
        # The old generation retires within its drain deadline (here: as soon as its calls ended).
        def retired() -> bool:
            try:
                runtime.get(rev1)
            except RevisionUnavailableError:
                return True
            return False

        await until(retired, what=f"revision {rev1} to retire", timeout_s=drain_deadline_s + 2.0)
        retired_after = time.monotonic() - published["at"]
        assert retired_after < drain_deadline_s, retired_after
        assert not runtime.retiring
        assert runtime.forced_drains == 0  # closed because its pins reached zero, not forced
        await no_pins(served, timeout_s=2.0)
        assert runtime.current is not None and runtime.current.revision > rev1
        # The gateway still serves: a call on the new generation works (a new legacy session: the
        # shared anonymous new-era session was granted its names before ``b`` existed, I9).
        async with Client(served.url, mode="legacy", read_timeout_seconds=WAIT) as client:
            await all_tools(client)
            result = await client.call_tool("up__b", {"x": "1"})
        assert not result.is_error and (result.meta or {}).get(REVISION_META) == runtime.current_revision
        print(
            f"\nrev {rev1} retired {retired_after:.2f} s after being superseded (drain deadline {drain_deadline_s} s)"
        )
