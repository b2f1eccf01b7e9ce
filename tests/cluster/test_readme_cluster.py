"""The README's scale-out blocks: the ``cluster:`` fragment loads as documented, and the two-line
recipe plus the HAProxy example really run three replicas where a tokenless legacy session keeps
working through the load balancer — and stops working when the stickiness lines are removed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import anyio
import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.reconciler.config import load_config
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.cluster.processes import Replica
from tests.support.ports import listening_socket
from tests.support.readme import REPO_ROOT, block
from tests.support.redis_server import RedisServer
from tests.support.waits import until

pytestmark = pytest.mark.anyio

HAPROXY_CFG = REPO_ROOT / "examples" / "cluster" / "haproxy.cfg"
CLUSTER_CFG = REPO_ROOT / "examples" / "cluster" / "gateway.yaml"


def test_cluster_config_block(tmp_path: Path) -> None:
    shown = yaml.safe_load(block("cluster-config").text)["cluster"]
    assert shown == yaml.safe_load(CLUSTER_CFG.read_text())["cluster"]  # the example uses the documented keys
    cfg = tmp_path / "g.yaml"
    cfg.write_text("sources: []\n" + block("cluster-config").text)
    loaded = load_config(cfg, environ={"REDIS_URL": "redis://127.0.0.1:6390/0", "REPLICA": "r1"})
    assert loaded.cluster is not None
    assert (loaded.cluster.store, loaded.cluster.replica_id, loaded.cluster.staleness_s) == (
        "redis://127.0.0.1:6390/0",
        "r1",
        3,
    )


def _spawn(argv: list[str], pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=pass_fds
    )


def _haproxy_config(tmp: Path, name: str, front: str, ports: list[int], *, sticky: bool) -> Path:
    """The README's HAProxy config with its front bound to ``front`` (``fd@N``) and its servers
    at the replicas' ``ports``."""
    text = HAPROXY_CFG.read_text().replace("127.0.0.1:8770", front)
    for i, port in enumerate(ports, start=1):
        text = text.replace(f"127.0.0.1:877{i}", f"127.0.0.1:{port}")
    if not sticky:
        text = "\n".join(line for line in text.splitlines() if "stick" not in line) + "\n"
    path = tmp / name
    path.write_text(text)
    return path


async def _legacy_rounds(url: str, rounds: int = 6) -> None:
    """One tokenless legacy session doing several requests (each a separate HTTP request)."""
    async with mcp_http_client() as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            for _ in range(rounds):
                assert (await client.list_tools()).tools


@pytest.mark.slow
async def test_recipe_and_haproxy_stickiness(redis_server: RedisServer, tmp_path: Path) -> None:
    haproxy = shutil.which("haproxy")
    if haproxy is None:
        pytest.skip("haproxy is not installed (optional: the stickiness example is checked with it)")
    first, second = block("cluster-recipe").lines()
    assert first.startswith("redis-server ") and "--save ''" in first and "--appendonly no" in first
    m = re.fullmatch(
        r"for i in 1 2 3; do REPLICA=r\$i REDIS_URL=(\S+) MCP_RECONCILER_OPERATOR_TOKENS=\S+ "
        r"\.venv/bin/mcp-reconciler serve --config (\S+) --port 877\$i & done",
        second,
    )
    assert m, second
    assert REPO_ROOT / m.group(2) == CLUSTER_CFG
    for line in block("cluster-haproxy").lines():
        assert line in HAPROXY_CFG.read_text().splitlines(), line
    replicas = [Replica(f"r{i}", tmp_path, CLUSTER_CFG, redis_server.url) for i in range(1, 4)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for r in replicas:
                    tg.start_soon(r.start)
        ports = [r.port for r in replicas]  # each bound port 0 and reported the port it got
        fronts = {}
        for sticky in (True, False):
            # HAProxy takes its front socket already bound (``bind fd@N``): no port picked for it to bind later.
            with listening_socket() as front_sock:
                front_sock.listen()
                front = front_sock.getsockname()[1]
                bind = f"fd@{front_sock.fileno()}"
                cfg = _haproxy_config(tmp_path, f"haproxy-{sticky}.cfg", bind, ports, sticky=sticky)
                procs.append(_spawn([haproxy, "-db", "-f", str(cfg)], pass_fds=(front_sock.fileno(),)))
            fronts[sticky] = f"http://127.0.0.1:{front}"
        with anyio.fail_after(30):  # every replica passed HAProxy's /readyz check
            for base in fronts.values():
                async with httpx2.AsyncClient(timeout=5) as http:

                    async def ready(base: str = base, http: httpx2.AsyncClient = http) -> bool:
                        try:
                            return (await http.get(f"{base}/readyz")).status_code == 200
                        except httpx2.HTTPError:
                            return False

                    await until(ready, what=f"{base}/readyz through HAProxy", timeout_s=30, every_s=0.1)
        await _legacy_rounds(f"{fronts[True]}/mcp")
        with pytest.raises(Exception) as lost:
            with anyio.fail_after(30):
                await _legacy_rounds(f"{fronts[False]}/mcp")
        # Without stickiness the session's next request reaches a replica that never saw it.
        assert "404" in repr(lost.value) or "not found" in repr(lost.value).lower(), repr(lost.value)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
        for r in replicas:
            r.kill()
