"""A real ``redis-server`` for the cluster tests: started on a free loopback port with no
persistence (``--save '' --appendonly no``), owned by one fixture that stops and reaps it.

:func:`redis_binary` finds the server; when it is missing the tests skip, except under
``CI=true``, where a missing server fails the run (CI must never pass by skipping). The
handle can kill -9, SIGSTOP/SIGCONT and restart the server on the same port (chaos tests)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

START_TIMEOUT_S = 10.0


def redis_binary() -> str:
    """The ``redis-server`` path; skips (or fails under ``CI=true``) when there is none."""
    found = shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server", "/usr/local/bin/redis-server") if os.path.exists(p)), None
    )
    if found is None:
        message = "redis-server is not installed (apt-get install -y redis-server); .ci/run installs it"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RedisServer:
    """One ``redis-server`` process on ``127.0.0.1:port``."""

    binary: str
    port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    stopped: bool = False
    log: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
                "--protected-mode",
                "yes",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def start(self) -> None:
        """Start (or restart, empty) on the same port and wait until it answers PING."""
        self.process = self._spawn()
        self.stopped = False
        with anyio.fail_after(START_TIMEOUT_S):
            while not await self.ping():
                if self.process.poll() is not None:
                    raise RuntimeError(f"redis-server exited with {self.process.returncode}")
                await anyio.sleep(0.02)  # waiting on an external process: bounded polling

    async def ping(self) -> bool:
        try:
            stream = await anyio.connect_tcp("127.0.0.1", self.port)
        except OSError:
            return False
        async with stream:
            await stream.send(b"PING\r\n")
            with anyio.move_on_after(1.0):
                return (await stream.receive()).startswith(b"+PONG")
        return False

    def kill(self) -> None:
        """kill -9 and reap (all data is lost: no persistence)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def sigstop(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self.stopped = True

    def sigcont(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self.stopped = False

    def close(self) -> None:
        if self.stopped:
            self.sigcont()
        self.kill()


def redis_cli_flush(port: int) -> None:
    """FLUSHALL through a raw socket (between tests sharing one server)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"FLUSHALL\r\n")
        assert s.recv(64).startswith(b"+OK")
