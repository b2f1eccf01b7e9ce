"""Child processes of a test process, read from ``/proc`` — what the autouse
``no_leaked_children`` fixture (tests/conftest.py) checks after every test (I14: no child
process outlives the test that started it), and what tests and benches use to see the
processes a gateway started."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

#: How long a child that has exited may wait for its owner to reap it (the owner's wait runs on
#: the event loop, which may still be closing when the test function returns). A bound, not a timing.
REAP_TIMEOUT_S = 5.0


def proc_stats() -> Iterator[tuple[int, list[bytes]]]:
    """Every process as ``(pid, fields)``: the fields of ``/proc/PID/stat`` after its command
    name (``fields[0]`` the state, ``[1]`` the parent pid, ``[11]``/``[12]`` user/system ticks)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # pid (comm) state ppid ...; comm may contain spaces and parentheses
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) >= 13:
            yield int(entry.name), fields


def child_pids(parent: int | None = None) -> set[int]:
    """Direct children of ``parent`` (default: this process), zombies included."""
    parent = os.getpid() if parent is None else parent
    return {pid for pid, fields in proc_stats() if int(fields[1]) == parent}


def cmdline(pid: int) -> str:
    """The command line of ``pid`` ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def leaked_children(before: set[int], timeout_s: float = REAP_TIMEOUT_S) -> dict[int, str]:
    """The children of this process that were not in ``before`` and are still there (unreaped)
    after at most ``timeout_s``, by command line; each is killed and reaped so that it does not
    poison the next test. Empty when the test's owners stopped and reaped everything they started."""
    deadline = time.monotonic() + timeout_s
    leaked = child_pids() - before
    while leaked and time.monotonic() < deadline:
        time.sleep(0.02)  # a sync fixture's teardown: no loop to wait on; reaping is the owner's (bounded)
        leaked = child_pids() - before
    described = {pid: cmdline(pid) or "?" for pid in leaked}
    for pid in leaked:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
    return described
