"""Every CLI command on a closed pipe (``mcp-reconciler status | head -3``): no traceback, no
"Exception ignored" on stderr, and the command's own exit code (0 here).

Each command runs as a subprocess whose stdout is a real pipe whose read end is already closed,
so its very first write fails (EPIPE): deterministic, unlike racing a ``head`` that may or may
not have exited yet. One shell pipeline through a real ``head`` runs as well. ``reconcile``
notices at its first line of output and stops cleanly, upstream included (I14); ``serve`` keeps
serving (issue 10: printing is never fatal to a running gateway)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from tests.api.conftest import OPERATOR_TOKEN, REPO_ROOT, served_gateway, upstream_source, write_config
from tests.support.gateway_process import alive

pytestmark = pytest.mark.anyio

CLI = [sys.executable, "-m", "mcp_reconciler.api.cli"]
TIMEOUT_S = 60.0


def _env(url: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
    if url is not None:
        env |= {"MCP_RECONCILER_URL": url, "MCP_RECONCILER_TOKEN": OPERATOR_TOKEN}
    return env


async def on_closed_pipe(args: Sequence[str], env: dict[str, str]) -> tuple[int, str]:
    """Run the CLI with stdout on a pipe nobody reads any more; (exit code, stderr)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        with anyio.fail_after(TIMEOUT_S):
            proc = await anyio.run_process(
                [*CLI, *args], stdin=subprocess.DEVNULL, stdout=write_end, cwd=REPO_ROOT, env=env, check=False
            )
    finally:
        os.close(write_end)
    return proc.returncode, proc.stderr.decode()


def _quiet(code: int, stderr: str, what: Sequence[str]) -> None:
    assert (code, stderr) == (0, ""), f"{' '.join(what)}: exit {code}, stderr:\n{stderr}"


OPERATOR_COMMANDS = [
    ["status"],
    ["sources"],
    ["generations"],
    ["sessions"],
    ["refresh"],
    ["refresh", "--no-wait"],
]


async def test_operator_commands_on_a_closed_pipe(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        env = _env(served.base_url)

        async def one(args: list[str]) -> None:
            code, err = await on_closed_pipe(args, env)
            _quiet(code, err, args)

        async with anyio.create_task_group() as tg:  # the gateway serves them all at once
            for args in OPERATOR_COMMANDS:
                tg.start_soon(one, args)
                tg.start_soon(one, [*args, "--json"])


async def test_local_commands_on_a_closed_pipe(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)

    async def one(args: list[str]) -> None:
        code, err = await on_closed_pipe(args, _env())
        _quiet(code, err, args)

    async with anyio.create_task_group() as tg:  # independent processes: run at once
        for args in (["--help"], ["--version"], ["status", "--help"], ["check-config", str(cfg)], ["demo"]):
            tg.start_soon(one, args)


async def test_gateway_commands_on_a_closed_pipe_stop_cleanly(tmp_path: Path) -> None:
    """``reconcile`` exists to print publications: with nobody reading it stops, upstream
    included. (``serve`` keeps serving when stdout goes away — printing is never fatal to a
    running gateway: tests/chaos/test_signals.py.)"""
    pid_file = tmp_path / "upstream.pid"
    source = upstream_source("up", "a")
    source["stdio"]["args"] += ["--pid-file", str(pid_file)]
    cfg = write_config(tmp_path, sources=[source])
    for args in (["reconcile", "--config", str(cfg)],):
        pid_file.unlink(missing_ok=True)
        code, err = await on_closed_pipe(args, _env() | {"MCP_RECONCILER_OPERATOR_TOKENS": OPERATOR_TOKEN})
        _quiet(code, err, args)
        upstream = int(pid_file.read_text())  # it did start, and its owner stopped it
        assert not alive(upstream), f"{args[0]}: upstream {upstream} outlived the gateway"
    # stdio: stdout is the protocol; stdin at EOF ends the session at once.
    code, err = await on_closed_pipe(["stdio", "--config", str(cfg)], _env())
    assert code == 0 and "Traceback" not in err, err


@pytest.mark.skipif(shutil.which("head") is None or shutil.which("bash") is None, reason="needs bash and head")
async def test_status_piped_into_head(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        script = '"$@" | head -3 >/dev/null; echo "${PIPESTATUS[0]}"'

        async def one() -> None:
            with anyio.fail_after(TIMEOUT_S):
                proc = await anyio.run_process(
                    ["bash", "-c", script, "_", *CLI, "status"], cwd=REPO_ROOT, env=_env(served.base_url), check=False
                )
            assert (proc.stdout.decode().strip(), proc.stderr.decode()) == ("0", "")

        async with anyio.create_task_group() as tg:  # five independent pipelines (each races its own head)
            for _ in range(5):
                tg.start_soon(one)
