"""A real ``redis-server`` for the cluster tests: started with no persistence (``--save ''
--appendonly no``), owned by one fixture that stops and reaps it.

It listens on a unix socket in a directory of its own (``--port 0``: no TCP at all), reached as
``unix://PATH`` (a store URL the gateway accepts): redis cannot bind port 0 and report the port
it got, and picking a free TCP port for it to bind later is the race that once failed a clean
``make test`` (``address already in use``). The socket's path is ours alone, restarts included.

:func:`redis_binary` finds the server; when it is missing the tests skip, except under
``CI=true``, where a missing server fails the run (CI must never pass by skipping). The
handle can kill -9, SIGSTOP/SIGCONT and restart the server on the same socket (chaos tests)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

START_TIMEOUT_S = 30.0  # a hang guard: ms when quiet, seconds on a saturated shared box


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


@dataclass
class RedisServer:
    """One ``redis-server`` process (its files in ``workdir``) on a unix socket,
    :attr:`socket_path`, in a short directory of its own under the system's temporary directory
    (a socket path is limited to 108 bytes; pytest's ``tmp_path`` can be longer), removed by
    :meth:`close`."""

    binary: str
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    stopped: bool = False
    log: list[str] = field(default_factory=list)
    socket_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.socket_dir = Path(tempfile.mkdtemp(prefix="redis-"))  # short: /tmp/redis-XXXXXXXX

    @property
    def socket_path(self) -> Path:
        return self.socket_dir / "redis.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}?db=0"

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                self.binary,
                "--port",
                "0",  # no TCP listener
                "--unixsocket",
                str(self.socket_path),
                "--unixsocketperm",
                "700",
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
        """Start (or restart, empty) on the same socket and wait until it answers PING."""
        self.process = self._spawn()
        self.stopped = False
        with anyio.fail_after(START_TIMEOUT_S):
            while not await self.ping():
                if self.process.poll() is not None:
                    raise RuntimeError(f"redis-server exited with {self.process.returncode}")
                await anyio.sleep(0.02)  # waiting on an external process: bounded polling

    async def ping(self) -> bool:
        try:
            stream = await anyio.connect_unix(self.socket_path)
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
        shutil.rmtree(self.socket_dir, ignore_errors=True)


def redis_cli_flush(server: RedisServer) -> None:
    """FLUSHALL through a raw socket (between tests sharing one server)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(server.socket_path))
        s.sendall(b"FLUSHALL\r\n")
        assert s.recv(64).startswith(b"+OK")
