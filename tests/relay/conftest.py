"""Fixtures for the relay tests: the gateway in front of ``tests.support.relay_server`` (a real
MCP server that samples, elicits, asks for roots and logs inside its tool calls), driven by the
SDK's ``mcp.Client`` in both eras over real transports.

Upstreams run over stdio (spawned by the gateway) or streamable HTTP on 127.0.0.1 (a subprocess
owned by the test, :class:`RelayUpstreams`), in the 2025-11-25 era (``--era legacy``: real
server→client requests) or the 2026-07-28 era (``InputRequiredResult``). Downstream clients
reach the gateway over streamable HTTP with a session token minted by the engine's authority
(anonymous ``/mcp`` access is not assumed), or over stdio (the gateway as a subprocess).

Every wait is bounded; no test sleeps to synchronize. ``no_leaked_children`` (autouse) checks
that no child process outlives a test."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.api.server import Served, serve_http
from mcp_reconciler.reconciler.authority import GrantPolicy
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.integration.conftest import (
    REPO_ROOT,
    wait_for_file,
)

WAIT = 20.0
MODULE = "tests.support.relay_server"
ERAS = {"legacy": "2025-11-25", "auto": "2026-07-28"}


def stdio_source(name: str = "up", *args: str) -> dict[str, Any]:
    """A stdio source running the relay server (spawned and stopped by the gateway)."""
    return {"name": name, "stdio": {"command": "python", "args": ["-m", MODULE, *args], "cwd": str(REPO_ROOT)}}


class RelayUpstreams:
    """Relay servers over streamable HTTP on 127.0.0.1, owned by one test (killed and reaped)."""

    def __init__(self, tmp: Path) -> None:
        self._tmp = tmp
        self._procs: list[subprocess.Popen[bytes]] = []

    def _spawn(self, port_file: Path, pid_file: Path, args: tuple[str, ...]) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", MODULE, "--transport", "http", "--port-file", str(port_file)]
        argv += ["--pid-file", str(pid_file)]
        proc = subprocess.Popen([*argv, *args], cwd=REPO_ROOT, stdin=subprocess.DEVNULL)
        self._procs.append(proc)
        return proc

    async def source(self, name: str = "up", *args: str) -> dict[str, Any]:
        """Start one server and return its source (``http``) for a gateway config."""
        pid_file = self._tmp / f"relay-{name}-{len(self._procs)}.pid"
        port_file = pid_file.with_suffix(".port")
        proc = self._spawn(port_file, pid_file, args)
        await wait_for_file(pid_file, proc=proc)  # written after the port file
        port = int(port_file.read_text())
        return {"name": name, "http": {"url": f"http://127.0.0.1:{port}/mcp"}}

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=5)


@pytest.fixture
def relay_upstreams(tmp_path: Path) -> Iterator[RelayUpstreams]:
    ups = RelayUpstreams(tmp_path)
    try:
        yield ups
    finally:
        ups.close()


async def upstream(
    relay_upstreams: RelayUpstreams, transport: str, era: str, name: str = "up", *extra: str
) -> dict[str, Any]:
    """A source of the relay server in ``era`` (``legacy`` | ``both``) over ``transport``."""
    args = ("--era", era, *extra)
    if transport == "stdio":
        return stdio_source(name, *args)
    return await relay_upstreams.source(name, *args)


def write_config(tmp: Path, sources: list[dict[str, Any]], **gateway: Any) -> Path:
    cfg = tmp / "gateway.yaml"
    cfg.write_text(json.dumps({"gateway": {"cooldown_s": 0.05, **gateway}, "sources": sources}))
    return cfg


@asynccontextmanager
async def gateway(cfg: Path) -> AsyncIterator[Served]:
    """The gateway over ``cfg`` on 127.0.0.1:<ephemeral>."""
    async with serve_http(cfg, host="127.0.0.1", port=0, watch_interval_s=0.1) as served:
        yield served


def session_token(served: Served, *, policy: GrantPolicy = GrantPolicy.CURRENT) -> str:
    """A new gateway session (granted everything current) and its bearer token."""
    engine = served.gateway.engine
    live = engine.current
    session = engine.sessions.create("relay-test", live.generation if live is not None else None, policy=policy)
    return session.token


@asynccontextmanager
async def client(served: Served, mode: str = "legacy", *, token: str | None = None, **kw: Any) -> AsyncIterator[Client]:
    """A downstream client of the served gateway with its own session token."""
    token = token or session_token(served)
    async with mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        async with Client(streamable_http_client(served.url, http_client=http), mode=mode, **kw) as c:
            assert c.protocol_version == ERAS[mode], c.protocol_version
            yield c


def stdio_gateway(cfg: Path) -> StdioServerParameters:
    """The gateway itself as a downstream stdio server."""
    return StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_reconciler.api.cli", "stdio", "--config", str(cfg)], cwd=str(REPO_ROOT)
    )


def payload(result: types.CallToolResult) -> dict[str, Any]:
    """The JSON a relay-server tool returned."""
    assert not result.is_error, result
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return dict(json.loads(block.text))


class Sampler:
    """A client's sampling callback: answers ``echo:<prompt>`` (model ``test-model``) and records
    what it was asked; with ``block=True`` it waits until cancelled and records that."""

    def __init__(self, *, block: bool = False, prefix: str = "echo") -> None:
        self.prompts: list[str] = []
        self.metas: list[Any] = []
        self.block = block
        self.prefix = prefix
        self.started = anyio.Event()
        self.cancelled = anyio.Event()

    async def __call__(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        content = params.messages[0].content
        prompt = getattr(content, "text", "")
        self.prompts.append(prompt)
        self.metas.append(params.meta)
        self.started.set()
        if self.block:
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                self.cancelled.set()
                raise
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=f"{self.prefix}:{prompt}"), model="test-model"
        )


class Gated(Sampler):
    """A sampler that answers only once ``gate`` opens: with two of them sharing a gate that
    opens when both were asked, both relayed requests are in flight at the same time."""

    def __init__(self, prefix: str, gate: list[anyio.Event | int]) -> None:
        super().__init__(prefix=prefix)
        self.gate = gate

    async def __call__(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        event, waiting = self.gate
        assert isinstance(event, anyio.Event) and isinstance(waiting, int)
        self.gate[1] = waiting + 1
        if waiting + 1 == 2:
            event.set()
        with anyio.fail_after(WAIT):
            await event.wait()
        return await super().__call__(context, params)


class Elicitor:
    """A client's elicitation callback: accepts forms with ``{"answer": <message>}`` and URLs."""

    def __init__(self) -> None:
        self.seen: list[types.ElicitRequestParams] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.seen.append(params)
        if isinstance(params, types.ElicitRequestURLParams):
            return types.ElicitResult(action="accept")
        return types.ElicitResult(action="accept", content={"answer": params.message})


class Logs:
    """A client's logging callback: records every ``notifications/message``."""

    def __init__(self) -> None:
        self.records: list[types.LoggingMessageNotificationParams] = []
        self._event = anyio.Event()

    async def __call__(self, params: types.LoggingMessageNotificationParams) -> None:
        self.records.append(params)
        event, self._event = self._event, anyio.Event()
        event.set()

    def data(self) -> list[Any]:
        return [r.data for r in self.records]

    async def wait_for(self, count: int, timeout_s: float = WAIT) -> None:
        with anyio.fail_after(timeout_s):
            while len(self.records) < count:
                await self._event.wait()
