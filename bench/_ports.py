"""Ports for benchmarks: every server a benchmark starts binds port 0 and reports the port it
got (``--port 0 --port-file PATH`` on ``mcp-reconciler serve`` and the test servers) — never a
port picked here for a child to bind later (another process can take it in between).

Waiting for another process goes through the tests' one bounded poll (``tests/support/waits.py``):
the repository root is put on ``sys.path`` here, as the bench scripts run as files from bench/."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(1, str(REPO_ROOT))

from tests.support.waits import file_text  # noqa: E402

WAIT_S = 60.0


def port_args(port_file: Path) -> list[str]:
    """The arguments that make a server bind port 0 and write the port it got to ``port_file``."""
    return ["--port", "0", "--port-file", str(port_file)]


async def reported_port(port_file: Path, exited: Callable[[], int | None], timeout_s: float = WAIT_S) -> int:
    """The port a child wrote to ``port_file`` (atomically), waiting for it; ``exited`` gives its
    exit code once it has one (a child that died is reported, not waited for)."""
    return int(await file_text(port_file, writer_exit=exited, timeout_s=timeout_s))
