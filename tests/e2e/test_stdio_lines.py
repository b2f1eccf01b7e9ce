"""``mcp-reconciler stdio`` on raw pipes (the gateway a subprocess, lines written by hand).

- Its stdin is read bounded (I18): a line of ``gateway.limits.body_bytes`` bytes is served, one
  of N+1 bytes is refused with ``INVALID_REQUEST`` under its own id (the rest of the line skipped
  as it streams), and the session goes on.
- The first request decides the connection's era, and a request of the other era is refused
  exactly as the SDK's own stdio server refuses it (the SDK server is the oracle)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from tests.e2e.conftest import upstream_source
from tests.integration.conftest import REPO_ROOT, SERVER_MODULE

pytestmark = pytest.mark.anyio

N = 2048
WAIT = 60.0


def ping(id_: int, size: int) -> bytes:
    """A ``ping`` request of exactly ``size`` bytes (padded in its ``_meta``)."""
    bare = {"jsonrpc": "2.0", "id": id_, "method": "ping", "params": {"_meta": {"pad": ""}}}
    pad = size - len(json.dumps(bare).encode())
    line = json.dumps({**bare, "params": {"_meta": {"pad": "a" * pad}}}).encode()
    assert len(line) == size
    return line


async def answer(out: BufferedByteReceiveStream) -> dict[str, Any]:
    with anyio.fail_after(WAIT):
        message: dict[str, Any] = json.loads(await out.receive_until(b"\n", 1 << 20))
    return message


async def test_I18_stdio_lines_are_bounded_at_n_and_n_plus_1_and_the_session_goes_on(tmp_path: Path) -> None:
    cfg = tmp_path / "gateway.yaml"
    doc = {"gateway": {"limits": {"body_bytes": N}}, "sources": [upstream_source("up", "--tools", "a")]}
    cfg.write_text(json.dumps(doc))
    proc: Process = await anyio.open_process(
        [sys.executable, "-m", "mcp_reconciler.api.cli", "stdio", "--config", str(cfg)],
        cwd=REPO_ROOT,
        stderr=subprocess.DEVNULL,
    )
    async with proc:
        assert proc.stdin is not None and proc.stdout is not None
        out = BufferedByteReceiveStream(proc.stdout)
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        await proc.stdin.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}).encode())
        await proc.stdin.send(b"\n")
        assert "result" in await answer(out)
        await proc.stdin.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')

        await proc.stdin.send(ping(2, N) + b"\n")
        assert await answer(out) == {"jsonrpc": "2.0", "id": 2, "result": {}}

        over = ping(3, N + 1)
        await proc.stdin.send(over[: N // 2])  # refused while it streams, skipped to its newline
        await proc.stdin.send(over[N // 2 :] + b"\n")
        refused = await answer(out)
        assert refused["id"] == 3 and refused["error"]["code"] == types.INVALID_REQUEST, refused
        assert f"{N} bytes" in refused["error"]["message"] and "limits.body_bytes" in refused["error"]["message"]

        await proc.stdin.send(ping(4, 100) + b"\n")  # the session goes on
        assert await answer(out) == {"jsonrpc": "2.0", "id": 4, "result": {}}
        await proc.stdin.aclose()  # EOF ends the session and the gateway, exit 0 (I14)
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}


async def exchange(argv: list[str], requests: list[dict[str, Any]]) -> list[Any]:
    """Each request's answer from a stdio server, as (error code, message, data) or ``"result"``."""
    proc: Process = await anyio.open_process(argv, cwd=REPO_ROOT, stderr=subprocess.DEVNULL)
    out: list[Any] = []
    async with proc:
        assert proc.stdin is not None and proc.stdout is not None
        lines = BufferedByteReceiveStream(proc.stdout)
        for request in requests:
            await proc.stdin.send(json.dumps(request).encode() + b"\n")
            got = await answer(lines)
            assert got["id"] == request["id"], got
            error = got.get("error")
            out.append((error["code"], error["message"], error.get("data")) if error else "result")
        await proc.stdin.aclose()
        with anyio.fail_after(WAIT):
            await proc.wait()
    return out


@pytest.mark.parametrize("first", ["modern", "legacy"])
async def test_the_first_request_decides_the_era_as_on_the_sdk_stdio_server(first: str, tmp_path: Path) -> None:
    if first == "modern":  # a discover probe, then the handshake (a probe that timed out client-side)
        requests = [
            {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": MODERN_META}},
            {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": INIT},
            {"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {"_meta": {**MODERN_META, "x": 1}}},
            {"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"_meta": {"x": 1}}},  # no envelope
        ]
    else:  # the handshake, then a request carrying the 2026 envelope
        requests = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT},
            {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"_meta": MODERN_META}},
            {"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": INIT},
        ]
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(json.dumps({"sources": [upstream_source("up", "--tools", "a")]}))
    gateway = await exchange([sys.executable, "-m", "mcp_reconciler.api.cli", "stdio", "--config", str(cfg)], requests)
    direct = await exchange([sys.executable, "-m", SERVER_MODULE, "--tools", "a"], requests)
    assert gateway == direct
    refused = [a for a in gateway if a != "result"]
    assert refused, gateway  # the other era was refused, not served
