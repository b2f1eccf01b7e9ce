"""I14 exactly-once teardown under chaos: closing the gateway (a) in the middle of a reconcile
cycle that is listing a slow source and connecting a new one, (b) while calls are in flight,
(c) from two tasks at once. Afterwards: every close returned (bounded), every in-flight call
ended with an error (never a hang), no child process is left (autouse ``no_leaked_children``
plus the upstream pid files), this process holds no socket on the gateway's or an upstream's
port, and every upstream connection the gateway opened was closed exactly once."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskStatus
from mcp import Client, MCPError

from mcp_reconciler.api.server import Served, serve_http
from mcp_reconciler.reconciler.upstream import UpstreamReader
from tests.chaos.conftest import WAIT, Outcomes, assert_sanitized, no_own_sockets_on, own_sockets_on, pid_alive
from tests.e2e.conftest import all_tools, upstream_source, write_config
from tests.integration.conftest import REPO_ROOT, SERVER_MODULE, HttpUpstreams, read_pid
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CLOSE_WITHIN_S = 20.0  # bound on one whole teardown (the uvicorn graceful-shutdown timeout is 3 s)
CALLS_END_WITHIN_S = 15.0  # bound on in-flight calls ending after the close started


async def _run_gateway(cfg: Path, stop: anyio.Event, done: dict[str, Any], *, task_status: TaskStatus[Served]) -> None:
    """``serve_http`` in its own task, so a test can leave the block while other work runs."""
    try:
        async with serve_http(cfg, port=0) as served:
            task_status.started(served)
            await stop.wait()
            done["exiting_at"] = time.monotonic()
    finally:
        done["exited_at"] = time.monotonic()


async def _blocked_calls(url: str, names: list[str], markers: list[Path], outcomes: Outcomes) -> None:
    """One client per name (alternating eras), each holding one ``block`` call in flight. The
    call's own outcome is recorded (a result, an MCPError, a transport failure); a client whose
    context then fails to exit cleanly (the gateway went away) is not the call's outcome."""

    async def one(i: int) -> None:
        with contextlib.suppress(Exception):
            async with Client(url, mode="legacy" if i % 2 == 0 else "auto", read_timeout_seconds=WAIT) as client:
                await all_tools(client)

                async def call() -> Any:
                    return await client.call_tool(names[i], {"marker": str(markers[i])})

                await outcomes.run(f"{names[i]}#{i}", call)

    async with anyio.create_task_group() as tg:
        for i in range(len(names)):
            tg.start_soon(one, i)


async def _wait_files(paths: list[Path], timeout_s: float = WAIT) -> None:
    """Until every marker file exists (the upstream processes write them)."""
    await until(lambda: all(p.exists() for p in paths), what=f"marker files {paths}", timeout_s=timeout_s)


def _slow_start_source(name: str, pid_file: Path, started: Path, go: Path) -> dict[str, Any]:
    """A stdio source that signals ``started`` as soon as the gateway spawns it, then speaks MCP
    only once the test creates ``go`` (a connect held open on the test's signal, not a timer)."""
    cmd = (
        f"touch {started}; while [ ! -e {go} ]; do sleep 0.02; done; "
        f"exec {sys.executable} -m {SERVER_MODULE} --tools l1 --pid-file {pid_file}"
    )
    return {"name": name, "stdio": {"command": "/bin/sh", "args": ["-c", cmd], "cwd": str(REPO_ROOT)}}


@pytest.mark.parametrize("scenario", ["during_cycle", "during_calls", "twice_concurrently"])
async def test_I14_close_during_cycle_calls_and_twice_concurrently(
    scenario: str, tmp_path: Path, http_upstreams: HttpUpstreams
) -> None:
    _web_proc, web_port = await http_upstreams.start("--tools", "w1")
    web = {"name": "web", "http": {"url": f"http://127.0.0.1:{web_port}/mcp"}}
    up_pid = tmp_path / "up.pid"
    pages_pid = tmp_path / "pages.pid"
    late_pid = tmp_path / "late.pid"
    if scenario == "during_cycle":
        # 240 tools (+7 control tools) one per page: listing "pages" costs 247 round trips,
        # within the 256-page bound.
        tools = ",".join(f"t{i:03d}" for i in range(240))
        sources = [upstream_source("pages", "--tools", tools, "--page-size", "1", "--pid-file", str(pages_pid)), web]
        gateway: dict[str, Any] = {"cooldown_s": 0.05}
    else:
        sources = [upstream_source("up", "--tools", "echo", "--pid-file", str(up_pid)), web]
        gateway = {"cooldown_s": 0.05}
    cfg = write_config(tmp_path, sources=sources, gateway=gateway)

    stop = anyio.Event()
    done: dict[str, Any] = {}
    outcomes = Outcomes()
    closes: list[float] = []

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            served: Served = await tg.start(_run_gateway, cfg, stop, done)
            gw = served.gateway
            rec = gw.rec
            assert isinstance(gw.reader, UpstreamReader)
            reader: UpstreamReader = gw.reader
            pids = [await read_pid(pages_pid if scenario == "during_cycle" else up_pid)]
            markers: list[Path] = []

            if scenario == "during_cycle":
                # A cycle that re-lists 247 pages and connects a source that is slow to start.
                started, go = tmp_path / "late.started", tmp_path / "late.go"
                late = json.dumps(_slow_start_source("late", late_pid, started, go))
                cfg.write_text(cfg.read_text().replace('"sources": [', f'"sources": [{late}, '))
                rec.trigger("all")
                await until(lambda: rec.reconciling, what="the cycle to start", timeout_s=WAIT)
                await _wait_files([started])  # the cycle is connecting "late", which waits for `go`
                assert rec.reconciling
                seq_in_flight = rec.queue.started
                t_close = time.monotonic()
                stop.set()
                await anyio.lowlevel.checkpoint()  # let the close start while the cycle is still held
                go.touch()  # close waits for the cycle in flight; let it finish
            else:
                names = [("up__block" if i % 2 == 0 else "web__block") for i in range(10)]
                markers = [tmp_path / f"in-flight-{i}" for i in range(len(names))]
                tg.start_soon(_blocked_calls, served.url, names, markers, outcomes)
                await _wait_files(markers)
                assert rec.runtime.current is not None and rec.runtime.current.pins == len(names)
                t_close = time.monotonic()
                if scenario == "during_calls":
                    stop.set()  # leave serve_http while 10 calls are in flight
                else:

                    async def close() -> None:
                        await rec.aclose()
                        closes.append(time.monotonic() - t_close)

                    with anyio.fail_after(CLOSE_WITHIN_S):
                        async with anyio.create_task_group() as closers:
                            closers.start_soon(close)
                            closers.start_soon(close)
                    assert len(closes) == 2 and rec.closed and rec.runtime.closed
                    # After the engine closed, in-flight calls have ended; a new call fails cleanly.
                    await until(
                        lambda: len(outcomes) >= len(names),
                        what=lambda: f"every call to end: {outcomes}",
                        timeout_s=CALLS_END_WITHIN_S,
                    )
                    async with Client(served.url, mode="legacy", read_timeout_seconds=WAIT) as late_client:
                        try:
                            await late_client.call_tool("up__echo", {"x": "late"})
                        except MCPError as exc:
                            late_error: MCPError | None = exc
                        else:
                            late_error = None
                    assert late_error is not None, "a call after close succeeded"
                    # "shutting down", never "starting, retry" (regression: see the tests below).
                    assert late_error.error.code == -32017, late_error.error
                    assert_sanitized(late_error, {-32017})
                    await rec.aclose()  # a third close, after the fact: returns at once
                    stop.set()  # and serve_http's own exit closes once more (idempotent)

            await until(lambda: "exited_at" in done, what="the gateway to exit", timeout_s=CLOSE_WITHIN_S)
            if markers:
                await until(
                    lambda: len(outcomes) >= len(markers),
                    what=lambda: f"every call to end: {outcomes}",
                    timeout_s=CALLS_END_WITHIN_S,
                )
    close_s = done["exited_at"] - t_close

    # Every in-flight call ended, with an error, within the bound (nothing hangs, nothing lost).
    if markers:
        assert len(outcomes) == len(markers)
        assert not outcomes.ok, [o.label for o in outcomes.ok]
        for o in outcomes.failed:
            assert o.ended - t_close < CALLS_END_WITHIN_S, (o.label, o.ended - t_close)
            if scenario == "twice_concurrently":
                # The engine closed under them while the HTTP edge was still up: each call got the
                # sanitized "shutting down" error of the runtime's teardown (I12, I14).
                assert isinstance(o.error, MCPError), f"{o.label}: {o.error!r}"
                assert_sanitized(o.error, {-32017})
    if scenario == "during_cycle":
        # The cycle in flight finished (close waited for it: the slow source did connect and was
        # listed) and no batch was abandoned midway.
        last = rec.last_outcome
        assert last is not None and last.seq == seq_in_flight, last
        assert last.status == "published" and {"pages", "late"} <= set(last.sources_read), last
        assert rec.queue.batches_done == rec.queue.started
        assert reader.opened == 3  # pages, web, late
        pids.append(int(late_pid.read_text()))

    # Exactly-once: every connection the reader opened was closed once, by the runtime.
    assert reader.open_connections() == 0
    assert rec.runtime.connections_closed == reader.opened, (rec.runtime.connections_closed, reader.opened)
    assert not rec.runtime.live() and rec.runtime.pending is None
    # No upstream process survives (the autouse fixture checks every child too).
    for pid in pids:
        assert not pid_alive(pid), pid
    # No socket of ours on the gateway's port or the HTTP upstream's (which is still running).
    await no_own_sockets_on([served.port, web_port])
    assert not own_sockets_on([served.port])
    print(
        f"\n{scenario}: teardown {close_s:.2f} s; connections opened/closed {reader.opened}/"
        f"{rec.runtime.connections_closed}; concurrent closes {[round(c, 2) for c in closes]}; "
        f"call errors {sorted({_describe(o.error) for o in outcomes.failed})}"
    )


def _describe(exc: BaseException | None) -> str:
    if isinstance(exc, MCPError):
        return f"MCPError {exc.error.code} {exc.error.message!r}"
    return type(exc).__name__


# -- regressions: bugs the chaos suite found, fixed --------------------------------------------


async def test_I14_call_after_close_is_answered_closed_not_starting(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, tools=("a",))
    async with serve_http(cfg, port=0) as served:
        async with Client(served.url, mode="legacy", read_timeout_seconds=WAIT) as client:
            await all_tools(client)
            await served.gateway.rec.aclose()
            with pytest.raises(MCPError) as caught:
                await client.call_tool("up__a", {"x": "1"})
    assert caught.value.error.code == -32017, caught.value.error
    assert_sanitized(caught.value, {-32017})


async def test_I14_exit_during_calls_ends_them_with_a_sanitized_error_promptly(
    tmp_path: Path,
) -> None:
    cfg = write_config(tmp_path, tools=("a",))
    stop = anyio.Event()
    done: dict[str, Any] = {}
    outcomes = Outcomes()
    markers = [tmp_path / f"in-flight-{i}" for i in range(4)]
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            served: Served = await tg.start(_run_gateway, cfg, stop, done)
            tg.start_soon(_blocked_calls, served.url, ["up__block"] * len(markers), markers, outcomes)
            await _wait_files(markers)
            t_close = time.monotonic()
            stop.set()
    assert len(outcomes) == len(markers)
    for o in outcomes.items:
        assert isinstance(o.error, MCPError), f"{o.label}: {o.error!r}"
        assert_sanitized(o.error, {-32013, -32017})
        assert o.ended - t_close < 2.0, o.ended - t_close
