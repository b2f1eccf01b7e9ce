"""Fixtures for integration tests against real MCP upstreams running as subprocesses.

- :func:`stdio_spec` builds a ``SourceSpec`` that spawns ``tests.support.upstream_server`` over
  stdio (the gateway's stdio channel, ``reconciler/stdio_peer.py``, owns that process; the
  reconciler's supervisor stops it).
- ``http_upstreams`` starts the server over streamable HTTP on 127.0.0.1 as a subprocess owned by
  the test; teardown always kills and reaps every one it started.
- ``no_leaked_children`` (autouse, tests/conftest.py, for every test) asserts that no child
  process of the test process outlives the test (I14), after a short bounded wait for reaping.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from mcp_reconciler.reconciler.model import SourceSpec
from tests.support.children import REAP_TIMEOUT_S as REAP_TIMEOUT_S
from tests.support.children import child_pids as child_pids
from tests.support.waits import file_text, until

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_MODULE = "tests.support.upstream_server"
#: A hang guard, not a timing: a Python upstream that imports the SDK starts in ~1 s on a quiet
#: box, but took more than 15 s with two full test runs and benchmarks on 2 shared cores (load 20).
READY_TIMEOUT_S = 60.0


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
    """The text of ``path`` once another process has written it (``proc``: its writer, whose
    death is reported rather than waited for)."""
    return await file_text(path, writer_exit=None if proc is None else proc.poll, timeout_s=timeout_s)


async def read_pid(path: Path, *, not_: int | None = None, timeout_s: float = READY_TIMEOUT_S) -> int:
    """The pid in ``path`` once it exists (and differs from ``not_``, for a respawn)."""
    pid = not_

    async def new_pid() -> bool:
        nonlocal pid
        pid = int(await wait_for_file(path, timeout_s))
        return pid != not_

    await until(new_pid, what=f"a pid other than {not_} in {path}", timeout_s=timeout_s)
    assert pid is not None
    return pid


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
