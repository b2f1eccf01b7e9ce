"""Fixtures for integration tests against real MCP upstreams running as subprocesses.

- :func:`stdio_spec` builds a ``SourceSpec`` that spawns ``tests.support.upstream_server`` over
  stdio (the gateway's stdio channel, ``reconciler/stdio_peer.py``, owns that process; the
  reconciler's supervisor stops it).
- ``http_upstreams`` starts the server over streamable HTTP on 127.0.0.1 as a subprocess owned by
  the test; teardown always kills and reaps every one it started.
- ``no_leaked_children`` (autouse) asserts that no child process of the test process outlives
  the test (I14), after a short bounded wait for reaping.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from mcp_reconciler.reconciler.model import SourceSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_MODULE = "tests.support.upstream_server"
#: A hang guard, not a timing: a Python upstream that imports the SDK starts in ~1 s on a quiet
#: box, but took more than 15 s with two full test runs and benchmarks on 2 shared cores (load 20).
READY_TIMEOUT_S = 60.0
REAP_TIMEOUT_S = 5.0


def server_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", SERVER_MODULE, *args]


def stdio_spec(name: str, *server_args: str, prefix: str | None = None) -> SourceSpec:
    """A stdio source running the test upstream with ``server_args`` (``--tools``, ``--pid-file`` ...)."""
    return SourceSpec(
        name=name,
        transport={
            "kind": "stdio",
            "command": sys.executable,
            "args": ["-m", SERVER_MODULE, *server_args],
            "cwd": str(REPO_ROOT),
        },
        prefix=prefix,
    )


def http_spec(name: str, port: int, *, prefix: str | None = None) -> SourceSpec:
    return SourceSpec(name=name, transport={"kind": "http", "url": f"http://127.0.0.1:{port}/mcp"}, prefix=prefix)


async def wait_for_file(
    path: Path, timeout_s: float = READY_TIMEOUT_S, proc: subprocess.Popen[Any] | None = None
) -> str:
    """Poll (bounded) until ``path`` exists and is non-empty; returns its text.

    Waiting on an external process to become ready is the one place polling is acceptable."""
    with anyio.fail_after(timeout_s):
        while True:
            with contextlib.suppress(FileNotFoundError):
                text = await anyio.Path(path).read_text()
                if text:
                    return text
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"upstream server exited with {proc.returncode} before it was ready")
            await anyio.sleep(0.02)


async def read_pid(path: Path, *, not_: int | None = None, timeout_s: float = READY_TIMEOUT_S) -> int:
    """The pid in ``path`` once it exists (and differs from ``not_``, for a respawn)."""
    with anyio.fail_after(timeout_s):
        while True:
            pid = int(await wait_for_file(path, timeout_s))
            if pid != not_:
                return pid
            await anyio.sleep(0.02)


class HttpUpstreams:
    """Starts HTTP upstream servers owned by one test; :meth:`close` kills and reaps them all."""

    def __init__(self, tmp: Path) -> None:
        self._tmp = tmp
        self._procs: list[subprocess.Popen[bytes]] = []
        self._n = 0

    transport = "http"  # the upstream server's --transport

    def _spawn(self, port: int, pid_file: Path, server_args: tuple[str, ...]) -> subprocess.Popen[bytes]:
        port_args = ("--port", str(port)) if port else ("--port", "0", "--port-file", str(pid_file) + ".port")
        proc = subprocess.Popen(
            server_argv("--transport", self.transport, *port_args, "--pid-file", str(pid_file), *server_args),
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
        )
        self._procs.append(proc)
        return proc

    async def start(self, *server_args: str, port: int | None = None) -> tuple[subprocess.Popen[bytes], int]:
        """Start a server (``--tools`` etc. in ``server_args``) and wait until it listens. Without
        ``port`` (a restart on a known port) the server binds port 0 and reports the port it got:
        no window in which another process could take it."""
        self._n += 1
        pid_file = self._tmp / f"http-{self._n}.pid"
        proc = self._spawn(port or 0, pid_file, server_args)
        try:
            await wait_for_file(pid_file, proc=proc)
            if not port:
                port = int(await wait_for_file(Path(str(pid_file) + ".port"), proc=proc))
        except BaseException:
            self.kill(proc)
            raise
        return proc, port

    @staticmethod
    def kill(proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL (no graceful shutdown: the upstream just vanishes) and reap."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=REAP_TIMEOUT_S)

    def close(self) -> None:
        for proc in self._procs:
            self.kill(proc)
        self._procs.clear()


HttpUpstreamsT = TypeVar("HttpUpstreamsT", bound=HttpUpstreams)


def owned(ups: HttpUpstreamsT) -> Iterator[HttpUpstreamsT]:
    """A fixture's body: ``ups``, closed (its servers killed and reaped) after the test."""
    try:
        yield ups
    finally:
        ups.close()


@pytest.fixture
def http_upstreams(tmp_path: Path) -> Iterator[HttpUpstreams]:
    yield from owned(HttpUpstreams(tmp_path))


class SseUpstreams(HttpUpstreams):
    """Like ``HttpUpstreams`` (kill and reap on close) but serving ``--transport sse``."""

    transport = "sse"


@pytest.fixture
def sse_upstreams(tmp_path: Path) -> Iterator[SseUpstreams]:
    yield from owned(SseUpstreams(tmp_path))


def child_pids(parent: int | None = None) -> set[int]:
    """Direct children of ``parent`` (default: this process), zombies included."""
    parent = os.getpid() if parent is None else parent
    out: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may contain spaces and parentheses
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) >= 2 and int(fields[1]) == parent:
            out.add(int(entry.name))
    return out


def _describe(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


@pytest.fixture(autouse=True)
def no_leaked_children() -> Iterator[None]:
    """I14: no child process started during the test survives it (bounded wait for reaping)."""
    before = child_pids()
    yield
    deadline = time.monotonic() + REAP_TIMEOUT_S
    leaked = child_pids() - before
    while leaked and time.monotonic() < deadline:
        time.sleep(0.02)
        leaked = child_pids() - before
    if leaked:
        described = {pid: _describe(pid) for pid in leaked}
        for pid in leaked:  # don't poison the next test
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)
        pytest.fail(f"child processes outlived the test: {described}")
