"""Gateway replicas as real processes (``mcp-reconciler serve``) sharing one ``redis-server``:
the config names the store as ``${REDIS_URL}`` and the replica as ``${REPLICA}`` (interpolated per
process), each replica runs its own upstream. Helpers talk to them the way an operator and an
agent would: the control API over HTTP, MCP over streamable HTTP with a session token."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.reconciler.freshness import DEFAULT_RACY_WINDOW_NS
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.chaos.gateway_process import OPERATOR, GatewayProcess
from tests.e2e.conftest import Changes, upstream_source
from tests.support.waits import until

WAIT_S = 20.0
OP = {"Authorization": f"Bearer {OPERATOR}"}


def cluster_config(tmp: Path, tools_file: Path, *, staleness_s: float = 1.5) -> Path:
    """One config for every replica: an upstream whose tools come from ``tools_file`` (watched:
    an edit respawns it), and the Redis store by environment variable."""
    source = upstream_source("up", "--tools-file", str(tools_file))
    source["watch"] = [str(tools_file)]
    doc = {
        "gateway": {"cooldown_s": 0.05},
        "sources": [source],
        "cluster": {"store": "${REDIS_URL}", "replica_id": "${REPLICA}", "staleness_s": staleness_s},
    }
    cfg = tmp / "gateway.yaml"
    cfg.write_text(json.dumps(doc))
    return cfg


def write_tools(path: Path, tools: list[str]) -> None:
    """Write the upstream's tool list, stamped outside the freshness racy window
    (``reconciler/freshness.py``): a stamp that recent makes every replica reload the source once
    more on a later sweep, with a new connection and so a new local revision, at a moment no test
    can wait for — the revisions the tests compare would then race that reload."""
    path.write_text(json.dumps(tools))
    settled = time.time() - 2 * DEFAULT_RACY_WINDOW_NS / 1e9
    os.utime(path, (settled, settled))


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Replica:
    """One replica process; :meth:`start` (again after a kill) starts it and waits until ready.
    The first start binds port 0 and learns the port from the gateway; a restart binds it again."""

    def __init__(self, name: str, tmp: Path, cfg: Path, redis_url: str, *, port: int = 0) -> None:
        self.name = name
        self.port = port
        self.dir = tmp / name
        self.dir.mkdir(exist_ok=True)
        self.cfg = cfg
        self.redis_url = redis_url
        self.gw: GatewayProcess | None = None

    async def start(self) -> None:
        with _env(REDIS_URL=self.redis_url, REPLICA=self.name):
            self.gw = GatewayProcess(self.dir, self.cfg, port=self.port)
        await self.gw.started()
        self.port = self.gw.port
        # Ready once its stdio upstream has started and been read: a process start, which takes
        # more than 15 s at load 20 — the same hang guard as the gateway's own start.
        await self.until_ready(True, timeout_s=60.0)

    @property
    def base(self) -> str:
        assert self.gw is not None
        return self.gw.base

    @property
    def url(self) -> str:
        assert self.gw is not None
        return self.gw.url

    def kill(self) -> None:
        if self.gw is not None:
            self.gw.close()

    async def get(self, path: str, **kw: Any) -> httpx2.Response:
        async with httpx2.AsyncClient(timeout=30) as http:
            return await http.get(f"{self.base}{path}", headers=OP, **kw)

    async def post(self, path: str, body: Any = None) -> httpx2.Response:
        async with httpx2.AsyncClient(timeout=60) as http:
            return await http.post(f"{self.base}{path}", headers=OP, json=body if body is not None else {})

    async def delete(self, path: str) -> httpx2.Response:
        async with httpx2.AsyncClient(timeout=30) as http:
            return await http.delete(f"{self.base}{path}", headers=OP)

    async def ready(self) -> bool:
        try:
            async with httpx2.AsyncClient(timeout=5) as http:
                return (await http.get(f"{self.base}/readyz")).status_code == 200
        except httpx2.HTTPError:
            return False

    async def until_ready(self, ready: bool, timeout_s: float = WAIT_S) -> None:
        """Wait (bounded polling of an external process) until ``/readyz`` says ``ready``."""

        async def answered() -> bool:
            return await self.ready() == ready

        await until(answered, what=f"replica {self.name} /readyz to say ready={ready}", timeout_s=timeout_s)

    async def status(self) -> dict[str, Any]:
        r = await self.get("/v1/status")
        r.raise_for_status()
        body: dict[str, Any] = r.json()
        return body

    async def until(self, path: str, code: int, timeout_s: float = WAIT_S) -> float:
        """Poll ``GET path`` until it answers ``code``; returns how long that took."""
        t0 = anyio.current_time()

        async def answered() -> bool:
            return (await self.get(path)).status_code == code

        await until(answered, what=f"GET {path} to answer {code}", timeout_s=timeout_s, every_s=0.01)
        return anyio.current_time() - t0

    def stderr(self) -> str:
        return self.gw.stderr() if self.gw is not None else ""


async def start_all(*replicas: Replica, timeout_s: float = 120) -> None:
    """Start ``replicas`` side by side and wait until every one is up."""
    with anyio.fail_after(timeout_s):
        async with anyio.create_task_group() as tg:
            for replica in replicas:
                tg.start_soon(replica.start)


@contextlib.asynccontextmanager
async def agent(url: str, token: str, mode: str = "legacy") -> AsyncIterator[tuple[Client, Changes]]:
    """An MCP client on ``url`` with ``token`` and a ``list_changed`` counter (new era: with a
    ``subscriptions/listen`` stream open)."""
    changes = Changes()
    async with mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode, message_handler=changes) as client:
            if mode == "legacy":
                yield client, changes
                return
            async with anyio.create_task_group() as tg:
                acked = anyio.Event()

                async def listen() -> None:
                    async with client.listen(tools_list_changed=True) as sub:
                        acked.set()
                        async for _event in sub:
                            pass

                tg.start_soon(listen)
                with anyio.fail_after(WAIT_S):
                    await acked.wait()
                yield client, changes
                tg.cancel_scope.cancel()
