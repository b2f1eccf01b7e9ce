"""Fixtures and helpers for the chaos suite: the whole gateway in-process (``serve_http``) under
load, churn, kills, hangs, config storms and floods, with real upstream processes.

Rules every chaos test follows:

- every request loop is bounded in count *and* time (``anyio.fail_after``) and stops by itself;
- every call's outcome is recorded (:class:`Outcomes`), so "nothing is lost" is an assertion:
  each call ended with a result or with a sanitized, expected error;
- ``no_leaked_children`` (autouse, tests/conftest.py) asserts that no child process
  outlives a test (I14); ``http_upstreams`` starts test-owned HTTP upstreams and kills them;
- instrumentation only observes: a runtime listener (publications) and a wrapper around
  ``LiveGeneration._mark_closed`` (when each revision closed); nothing in ``reconciler/`` or
  ``api/`` is modified.

Everything is loopback only."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from mcp import MCPError

from mcp_reconciler.api.server import Served
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.runtime import LiveGeneration
from tests.integration.conftest import (  # noqa: F401 - the fixtures must be visible in this directory
    http_upstreams,
)
from tests.support.waits import no_pins as no_pins  # shared with tests/e2e
from tests.support.waits import until

WAIT = 20.0  # bound on any single wait in this directory

# The front door's stable client-facing errors (api/errors.py) this suite may meet, with the
# exact sanitized message each carries (I12). Messages naming a revision are patterns.
ERROR_MESSAGES: dict[int, re.Pattern[str]] = {
    -32012: re.compile(r"revision \d+ is not live; (the current revision is \d+|nothing is published yet)"),
    -32013: re.compile(
        r"revision \d+ was retired while this operation ran past its drain deadline; retry on the current revision"
    ),
    -32014: re.compile(r"the operation exceeded its deadline of [0-9.]+ s"),
    -32015: re.compile(r"upstream unavailable; retry later|no catalog is published yet; retry shortly"),
    -32017: re.compile(r"the gateway is shutting down"),
}
RETRYABLE = {-32013, -32014, -32015}
# What must never reach a client (I12): paths, hosts, ports, pids, upstream text.
LEAK_MARKERS = ("/", "127.0.0.1", "localhost", "pid", "Traceback", "python")


def assert_sanitized(exc: MCPError, allowed: Iterable[int]) -> None:
    """``exc`` is one of the ``allowed`` stable codes, with its exact generic message and a
    ``data`` dict naming the code and whether it is retryable; no upstream detail leaks."""
    allowed = set(allowed)
    code, message, data = exc.error.code, exc.error.message, exc.error.data
    assert code in allowed, f"unexpected error code {code}: {message!r} {data!r}"
    pattern = ERROR_MESSAGES.get(code)
    assert pattern is not None and pattern.fullmatch(message), f"unsanitized message for {code}: {message!r}"
    for marker in LEAK_MARKERS:
        assert marker not in message, f"{marker!r} leaked in {message!r}"
    assert isinstance(data, dict), data
    assert "code" in data and "retryable" in data, data
    if code in RETRYABLE:
        assert data["retryable"] is True, data


# -- call outcomes --------------------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    label: str
    started: float  # time.monotonic() (the anyio asyncio clock)
    ended: float
    result: Any = None
    error: BaseException | None = None

    @property
    def elapsed(self) -> float:
        return self.ended - self.started


@dataclass
class Outcomes:
    """One record per call. :meth:`run` never lets an exception escape (it is recorded), so a
    test can count outcomes and prove that nothing was lost."""

    items: list[Outcome] = field(default_factory=list)

    async def run(self, label: str, fn: Callable[[], Any]) -> Outcome:
        t0 = time.monotonic()
        try:
            result = await fn()
        except Exception as exc:
            out = Outcome(label, t0, time.monotonic(), error=exc)
        else:
            out = Outcome(label, t0, time.monotonic(), result=result)
        self.items.append(out)
        return out

    @property
    def ok(self) -> list[Outcome]:
        return [o for o in self.items if o.error is None]

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.items if o.error is not None]

    def __len__(self) -> int:
        return len(self.items)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty list."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


# -- the engine, observed -------------------------------------------------------------------------


class RevisionLog:
    """When each revision was published (runtime listener) and closed (wrapper around
    ``LiveGeneration._mark_closed``), and every publication-time check a test asks for."""

    def __init__(self, served: Served, check: Callable[[Generation], str | None] | None = None) -> None:
        self.runtime = served.gateway.rec.runtime
        self.published: dict[int, float] = {}
        self.violations: list[str] = []
        self._check = check
        live = self.runtime.current
        if live is not None:
            self.published[live.revision] = 0.0  # live since before the log started
        self.remove = self.runtime.add_listener(self._on_publish)

    def _on_publish(self, new: Generation, _old: Generation | None) -> None:
        self.published[new.revision] = time.monotonic()
        if self._check is not None:
            problem = self._check(new)
            if problem:
                self.violations.append(problem)

    @property
    def closed(self) -> dict[int, float]:
        return CLOSED.get(id(self.runtime), {})


CLOSED: dict[int, dict[int, float]] = {}  # id(runtime) -> revision -> time.monotonic() closed


@pytest.fixture(autouse=True)
def record_closures(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Observe (never change) when each live generation closes."""
    original = LiveGeneration._mark_closed

    def _mark_closed(self: LiveGeneration) -> None:
        CLOSED.setdefault(id(self._runtime), {}).setdefault(self.revision, time.monotonic())
        original(self)

    monkeypatch.setattr(LiveGeneration, "_mark_closed", _mark_closed)
    try:
        yield
    finally:
        CLOSED.clear()


# -- process resources ----------------------------------------------------------------------------

_TCP_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
}


def _own_socket_inodes() -> set[int]:
    out: set[int] = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def own_sockets_on(ports: Iterable[int]) -> list[str]:
    """TCP sockets this process holds a descriptor for whose local or remote port is one of
    ``ports`` (any state: LISTEN, ESTABLISHED, CLOSE_WAIT ... all mean a descriptor not closed)."""
    ports = set(ports)
    inodes = _own_socket_inodes()
    found: list[str] = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            local, remote, state, inode = parts[1], parts[2], parts[3], int(parts[9])
            lport, rport = int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16)
            if inode in inodes and (lport in ports or rport in ports):
                found.append(f"{_TCP_STATES.get(state, state)} {lport}->{rport} inode {inode}")
    return found


async def no_own_sockets_on(ports: Iterable[int], timeout_s: float = 5.0) -> None:
    """Bounded wait until this process holds no socket on ``ports`` (closing is asynchronous)."""
    ports = set(ports)
    await until(
        lambda: not own_sockets_on(ports),
        what=lambda: f"sockets still open on {sorted(ports)}: {own_sockets_on(ports)}",
        timeout_s=timeout_s,
    )


PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def pid_alive(pid: int) -> bool:
    """Running (not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"
