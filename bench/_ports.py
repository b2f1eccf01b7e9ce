"""Ports for benchmarks: every server a benchmark starts binds port 0 and reports the port it
got (``--port 0 --port-file PATH`` on ``mcp-reconciler serve`` and the test servers) — never a
port picked here for a child to bind later (another process can take it in between)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio

WAIT_S = 60.0


def port_args(port_file: Path) -> list[str]:
    """The arguments that make a server bind port 0 and write the port it got to ``port_file``."""
    return ["--port", "0", "--port-file", str(port_file)]


async def reported_port(port_file: Path, exited: Callable[[], int | None], timeout_s: float = WAIT_S) -> int:
    """The port a child wrote to ``port_file`` (atomically), waiting for it; ``exited`` gives its
    exit code once it has one (a child that died is reported, not waited for)."""
    with anyio.fail_after(timeout_s):
        while True:
            path = anyio.Path(port_file)
            text = await path.read_text() if await path.exists() else ""
            if text.strip():
                return int(text)
            if (code := exited()) is not None:
                raise RuntimeError(f"the server exited with {code} before it reported its port")
            await anyio.sleep(0.02)  # waiting on another process: bounded polling
