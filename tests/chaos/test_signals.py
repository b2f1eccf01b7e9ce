"""Stopping a served gateway with a signal while calls are in flight (issue 10, item 9; I14).

The gateway runs as its own process (``mcp-reconciler serve``); its stdio upstream ignores stdin
close *and* SIGTERM (``--linger``), so only the supervisor's process-group SIGKILL stops it. One
call per protocol era is in flight, held by the upstream's ``block`` tool, when the first signal
arrives; a second signal follows while the gateway is still tearing down. Expected:

- both calls end with a clean JSON-RPC error (``-32017``, ``retryable: true``), not a cut stream
  or a plain-text 500;
- the process exits 0 and prints no traceback, the second signal included;
- no upstream process is left (the lingering one included: I14).

Unwritable stdout (item 10): with stdout on ``/dev/full`` or on a pipe nobody reads, ``serve``
starts, serves, reloads on SIGHUP (which prints a line) and stops on SIGTERM with exit 0."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.chaos.conftest import pid_alive
from tests.chaos.gateway_process import GatewayProcess, write_json
from tests.e2e.conftest import upstream_source
from tests.integration.conftest import read_pid, wait_for_file
from tests.support.waits import exited, until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

GRACE_S = 1.0


async def _cycle_after(gw: GatewayProcess, seq: int) -> bool:
    """The gateway's last reconcile cycle is a later one than ``seq``."""
    return bool((await gw.status())["last_cycle"]["seq"] > seq)


async def _unhealthy(gw: GatewayProcess) -> bool:
    return not await gw.healthy(0.5)


def reap_orphan(pid_file: Path) -> None:
    """If the test failed and left the lingering upstream behind (PPID 1), kill it by its pid:
    never leave it for the next test (it would sleep for ten minutes)."""
    import contextlib
    import os

    with contextlib.suppress(OSError, ValueError):
        pid = int(pid_file.read_text())
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


ERA_MODES = {"legacy": "legacy", "2026": "auto"}


async def _held_call(url: str, token: str, mode: str, marker: Path, outcome: dict[str, Any]) -> None:
    """One client holding one ``up__block`` call; records how the call ended."""
    try:
        async with mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
            async with Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=60) as c:
                try:
                    outcome["result"] = await c.call_tool("up__block", {"marker": str(marker)})
                except MCPError as exc:
                    outcome["error"] = exc
                except Exception as exc:  # a cut stream, an HTTP 500: what must not happen
                    outcome["broken"] = repr(exc)
    except BaseException as exc:  # the client's own exit once the gateway is gone is not the call's outcome
        outcome.setdefault("exit", repr(exc))
        if not isinstance(exc, Exception):
            raise


@pytest.mark.parametrize(("first", "second"), [("SIGTERM", "SIGTERM"), ("SIGINT", "SIGTERM"), ("SIGTERM", "SIGINT")])
async def test_signal_with_calls_in_flight_stops_cleanly(first: str, second: str, tmp_path: Path) -> None:
    pid_file = tmp_path / "up.pid"
    cfg = write_json(
        tmp_path / "gateway.yaml",
        {
            "gateway": {"cooldown_s": 0.05, "shutdown_grace_s": GRACE_S},
            "sources": [upstream_source("up", "--tools", "echo", "--linger", "--pid-file", str(pid_file))],
        },
    )
    gw = GatewayProcess(tmp_path, cfg)
    try:
        await gw.started()
        upstream_pid = await read_pid(pid_file)
        token = await gw.session_token()
        outcomes: dict[str, dict[str, Any]] = {era: {} for era in ERA_MODES}
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for era, mode in ERA_MODES.items():
                    tg.start_soon(_held_call, gw.url, token, mode, tmp_path / f"{era}.marker", outcomes[era])
                for era in ERA_MODES:
                    await wait_for_file(tmp_path / f"{era}.marker")
                gw.signal(getattr(signal, first))
                # Both calls are answered within the grace plus a bound, while teardown goes on.
                await until(
                    lambda: all(("error" in o or "broken" in o or "result" in o) for o in outcomes.values()),
                    what=lambda: f"every call to end: {outcomes}",
                    timeout_s=GRACE_S + 10,
                )
                gw.signal(getattr(signal, second))  # the upstream is still lingering: teardown is running
            code = await gw.exited(30)
        stderr = gw.stderr()
        for era, o in outcomes.items():
            assert "broken" not in o and "result" not in o, (era, o, stderr[-3000:])
            err = o["error"]
            assert err.error.code == -32017, (era, err.error)
            assert err.error.message == "the gateway is shutting down", (era, err.error)
            assert isinstance(err.error.data, dict) and err.error.data.get("retryable") is True, (era, err.error)
        assert code == 0, (code, stderr[-3000:])
        assert "Traceback" not in stderr, stderr[-3000:]
        assert not pid_alive(upstream_pid), f"upstream {upstream_pid} outlived the gateway"
    finally:
        gw.close()
        reap_orphan(pid_file)


@pytest.mark.parametrize("stdout", ["full", "closed-pipe"])
async def test_unwritable_stdout_never_stops_the_gateway(stdout: str, tmp_path: Path) -> None:
    cfg = write_json(
        tmp_path / "gateway.yaml",
        {"gateway": {"cooldown_s": 0.05}, "sources": [upstream_source("up", "--tools", "echo")]},
    )
    gw = GatewayProcess(tmp_path, cfg, stdout=stdout)  # the port comes back in its port file
    try:
        await gw.started()
        for _ in range(3):  # each reload prints a line to the broken stdout
            seq = (await gw.status())["last_cycle"]["seq"]
            gw.signal(signal.SIGHUP)
            await until(  # the reload's cycle finished, and the process lives on
                lambda seq=seq: _cycle_after(gw, seq), what="the reload's cycle", timeout_s=20
            )
            assert gw.proc.poll() is None, gw.stderr()[-3000:]
        assert await gw.healthy()
        gw.signal(signal.SIGTERM)
        code = await gw.exited(30)
        stderr = gw.stderr()
        assert code == 0, (code, stderr[-3000:])
        assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr[-3000:]
        assert "stdout is not writable" in stderr  # said once, in the log
    finally:
        gw.close()


@pytest.mark.parametrize("moment", ["starting", "idle_session"])
async def test_sigterm_stops_the_stdio_gateway_and_its_upstreams(tmp_path: Path, moment: str) -> None:
    """``mcp-reconciler stdio`` too: SIGTERM while its session is open stops every upstream
    (the lingering one included) and exits 0 — sent while it starts, or once its session is
    initialized and idle, with its stdin still held open by the client (the SDK's reader
    blocked in a thread there until the client wrote or closed: ``api/stdio_input.py``)."""
    import json
    import subprocess
    import sys

    from tests.integration.conftest import REPO_ROOT

    pid_file = tmp_path / "up.pid"
    cfg = write_json(
        tmp_path / "gateway.yaml",
        {"sources": [upstream_source("up", "--tools", "echo", "--linger", "--pid-file", str(pid_file))]},
    )
    proc = subprocess.Popen(  # noqa: ASYNC220 - one process, owned and reaped below
        [sys.executable, "-m", "mcp_reconciler.api.cli", "stdio", "--config", str(cfg)],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,  # held open: the session does not end by itself
        stdout=subprocess.PIPE if moment == "idle_session" else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        upstream_pid = await read_pid(pid_file)
        if moment == "idle_session":  # initialized, answered, and then nothing more on stdin
            assert proc.stdin is not None and proc.stdout is not None
            init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}).encode())
            proc.stdin.write(b"\n")
            proc.stdin.flush()
            with anyio.fail_after(30):  # the thread ends when the line comes, or when the process dies
                answer = json.loads(await anyio.to_thread.run_sync(proc.stdout.readline))
            assert answer["id"] == 1 and "result" in answer, answer
        proc.send_signal(signal.SIGTERM)
        await exited(proc, timeout_s=30)
        assert proc.stderr is not None
        stderr = proc.stderr.read().decode(errors="replace")
        assert proc.returncode == 0, (proc.returncode, stderr[-3000:])
        assert "Traceback" not in stderr, stderr[-3000:]
        assert not pid_alive(upstream_pid), f"upstream {upstream_pid} outlived the gateway"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        reap_orphan(pid_file)
        assert proc.stdin is not None
        proc.stdin.close()


async def test_sigterm_lets_calls_that_finish_within_the_grace_finish(tmp_path: Path) -> None:
    """The grace is real: a call that completes during it gets its result, in both eras."""
    pid_file = tmp_path / "up.pid"
    release = tmp_path / "release"
    cfg = write_json(
        tmp_path / "gateway.yaml",
        {
            "gateway": {"cooldown_s": 0.05, "shutdown_grace_s": 20},
            "sources": [upstream_source("up", "--tools", "echo", "--pid-file", str(pid_file))],
        },
    )
    gw = GatewayProcess(tmp_path, cfg)
    try:
        await gw.started()
        token = await gw.session_token()
        outcomes: dict[str, dict[str, Any]] = {era: {} for era in ERA_MODES}

        async def held(mode: str, marker: Path, outcome: dict[str, Any]) -> None:
            try:
                async with mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
                    async with Client(streamable_http_client(gw.url, http_client=http), mode=mode) as c:
                        await c.list_tools()  # or the SDK lists on its own after the call (new connection)
                        args = {"marker": str(marker), "release": str(release)}
                        outcome["result"] = await c.call_tool("up__block", args)
            except Exception as exc:  # the client's own exit (its DELETE) meets a stopped gateway
                outcome.setdefault("exit", repr(exc))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for era, mode in ERA_MODES.items():
                    tg.start_soon(held, mode, tmp_path / f"{era}.marker", outcomes[era])
                for era in ERA_MODES:
                    await wait_for_file(tmp_path / f"{era}.marker")
                gw.signal(signal.SIGTERM)
                await until(  # the gateway stopped accepting: the grace is running
                    lambda: _unhealthy(gw), what="the gateway to stop accepting", timeout_s=10
                )
                release.touch()
            code = await gw.exited(30)
        for era, o in outcomes.items():
            assert "result" in o and not o["result"].is_error, (era, o)
        assert code == 0, gw.stderr()[-3000:]
    finally:
        gw.close()
        reap_orphan(pid_file)


async def _parked_call(url: str, token: str, mode: str, outcome: dict[str, Any]) -> None:
    """One client whose ``up__echo`` call parks for an approval; records how the call ended."""
    try:
        async with mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
            async with Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=60) as c:
                try:
                    outcome["result"] = await c.call_tool("up__echo", {"era": mode})
                except MCPError as exc:
                    outcome["error"] = exc
                except Exception as exc:  # a cut stream, an HTTP 500: what must not happen
                    outcome["broken"] = repr(exc)
    except BaseException as exc:
        outcome.setdefault("exit", repr(exc))
        if not isinstance(exc, Exception):
            raise


async def test_sigterm_answers_calls_parked_for_an_approval(tmp_path: Path) -> None:
    """SIGTERM with calls parked for an approval (ADR 0034): each is answered with the clear,
    retryable ``approval_withdrawn`` error naming the shutdown — not lost, not cut — and the
    gateway exits 0 at once (parked calls do not wait out the grace)."""
    import httpx2

    from tests.chaos.gateway_process import OPERATOR

    cfg = write_json(
        tmp_path / "gateway.yaml",
        {
            "gateway": {"cooldown_s": 0.05, "shutdown_grace_s": 30},
            "sources": [upstream_source("up", "--tools", "echo")],
            "approvals": {"required": ["up__echo"], "timeout_s": 600},
        },
    )
    gw = GatewayProcess(tmp_path, cfg)
    try:
        await gw.started()
        token = await gw.session_token()
        outcomes: dict[str, dict[str, Any]] = {era: {} for era in ERA_MODES}
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for era, mode in ERA_MODES.items():
                    tg.start_soon(_parked_call, gw.url, token, mode, outcomes[era])
                # Both calls parked: /v1/approvals lists them (the process's state, polled).
                async with httpx2.AsyncClient(base_url=gw.base, headers={"Authorization": f"Bearer {OPERATOR}"}) as rc:

                    async def both_parked() -> bool:
                        return len((await rc.get("/v1/approvals")).json()["approvals"]) >= 2

                    await until(both_parked, what="both calls parked", timeout_s=60)
                started = anyio.current_time()
                gw.signal(signal.SIGTERM)
                await until(
                    lambda: all(("error" in o or "broken" in o or "result" in o) for o in outcomes.values()),
                    what=lambda: f"every call to end: {outcomes}",
                    timeout_s=10,
                )
            code = await gw.exited(30)
            assert anyio.current_time() - started < 25  # not the 30 s grace: nothing was left to wait for
        stderr = gw.stderr()
        for era, o in outcomes.items():
            assert "broken" not in o and "result" not in o, (era, o, stderr[-3000:])
            err = o["error"]
            assert err.error.code == -32044, (era, err.error)
            assert "withdrawn: the gateway is shutting down" in err.error.message, (era, err.error)
            assert err.error.data.get("code") == "approval_withdrawn" and err.error.data.get("retryable") is True
        assert code == 0, (code, stderr[-3000:])
        assert "Traceback" not in stderr, stderr[-3000:]
    finally:
        gw.close()
