"""The gateway as a separate process (``mcp-reconciler serve``), for the chaos tests that need
what only a real process has: signals, its own descriptor limit, its own stdout and stderr.

:class:`GatewayProcess` starts ``python -m mcp_reconciler.api.cli serve --port 0`` with an
operator token in its environment, reads the endpoint it prints, and on :meth:`close` kills and
reaps it if it is still running (the test's ``no_leaked_children`` then checks the rest).
stdout and stderr go to files in the test's directory, so a test can read them after the
process exited and a full pipe can never stall the gateway."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

from tests.integration.conftest import REPO_ROOT
from tests.support.waits import exited, until

OPERATOR = "chaos-operator-token-0123456789"


class GatewayProcess:
    """One ``serve`` subprocess (see the module docstring)."""

    def __init__(
        self,
        tmp: Path,
        cfg: Path,
        *,
        nofile: int | None = None,
        extra_args: tuple[str, ...] = (),
        stdout: str = "file",
        port: int = 0,
    ) -> None:
        """``stdout``: ``file`` (readable by the test), ``full`` (``/dev/full``: every write fails
        with ENOSPC) or ``closed-pipe`` (a pipe whose reader is gone: EPIPE). The gateway binds
        ``port`` (default 0: an ephemeral port) and writes the port it got to a port file
        (``serve --port-file``), which :meth:`started` reads whatever happens to stdout; a
        ``port`` is given only to restart a replica where it was."""
        self.stdout_path = tmp / "gateway.stdout"
        self.stderr_path = tmp / "gateway.stderr"
        env = {**os.environ, "MCP_RECONCILER_OPERATOR_TOKENS": OPERATOR, "PYTHONUNBUFFERED": "1"}
        preexec: Callable[[], None] | None = None
        if nofile is not None:
            import resource

            def preexec() -> None:  # the child's own limit, soft and hard: it cannot raise it
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.stdout_mode = stdout
        read_end: int | None = None
        if stdout == "file":
            out = open(self.stdout_path, "wb")  # noqa: SIM115 - closed below, after the spawn
        elif stdout == "full":
            out = open("/dev/full", "wb")  # noqa: SIM115
        else:
            read_end, write_end = os.pipe()
            out = os.fdopen(write_end, "wb")
        argv = [sys.executable, "-m", "mcp_reconciler.api.cli", *extra_args, "serve"]
        self.port_path = tmp / "gateway.port"
        self.port_path.unlink(missing_ok=True)  # a restart: the new process writes it afresh
        argv += ["--config", str(cfg), "--port", str(port), "--port-file", str(self.port_path)]
        try:
            with open(self.stderr_path, "wb") as err:
                self.proc = subprocess.Popen(
                    argv,
                    cwd=REPO_ROOT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    preexec_fn=preexec,
                )
        finally:
            out.close()
            if read_end is not None:
                os.close(read_end)  # the reader is gone before the gateway writes a line
        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp" if port else ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def base(self) -> str:
        return self.url.removesuffix("/mcp")

    async def started(self, timeout_s: float = 60.0) -> None:
        """Wait (bounded) until the gateway wrote the port it listens on, then until ``/healthz``
        answers there."""

        async def ready() -> bool:  # another process: its port file, then its /healthz
            if not self.url and (text := self.port_path.read_text() if self.port_path.exists() else ""):
                self.port = int(text)
                self.url = f"http://127.0.0.1:{self.port}/mcp"
            if self.url and await self.healthy():
                return True
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.proc.returncode}:\n{self.stderr()}")
            return False

        await until(ready, what=lambda: f"the gateway to be healthy:\n{self.stderr()}", timeout_s=timeout_s)

    async def healthy(self, timeout_s: float = 2.0) -> bool:
        """Whether ``/healthz`` answers 200 within ``timeout_s``."""
        try:
            async with httpx2.AsyncClient(timeout=timeout_s) as http:
                return (await http.get(f"{self.base}/healthz")).status_code == 200
        except httpx2.HTTPError:
            return False

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    async def exited(self, timeout_s: float) -> int:
        """The exit code, waiting (bounded) for the process to end."""
        return await exited(self.proc, timeout_s=timeout_s)

    def fds(self) -> int:
        """Open descriptors of the gateway process right now."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def rss(self) -> int:
        with open(f"/proc/{self.pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    async def session_token(self) -> str:
        """A fresh agent session's bearer token (``POST /v1/sessions`` as the operator)."""
        async with httpx2.AsyncClient(timeout=10) as http:
            r = await http.post(f"{self.base}/v1/sessions", headers={"Authorization": f"Bearer {OPERATOR}"}, json={})
            r.raise_for_status()
            return str(r.json()["token"])

    async def status(self) -> dict[str, Any]:
        async with httpx2.AsyncClient(timeout=10) as http:
            r = await http.get(f"{self.base}/v1/status", headers={"Authorization": f"Bearer {OPERATOR}"})
            r.raise_for_status()
            body: dict[str, Any] = r.json()
            return body

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    past = time.time_ns() - 60_000_000_000  # out of the freshness tracker's racy window
    os.utime(path, ns=(past, past))
    return path
