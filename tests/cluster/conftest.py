"""Fixtures of the cluster tests: a real ``redis-server`` per test (no persistence, free loopback
port; ``tests/support/redis_server.py``), and both store implementations for the contract tests."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mcp_reconciler.reconciler.cluster import MemoryStore
from mcp_reconciler.reconciler.cluster.redis_store import RedisStore
from mcp_reconciler.reconciler.cluster.store import ClusterStore
from tests.support.redis_server import RedisServer, redis_binary


@pytest.fixture
async def redis_server(tmp_path: Path) -> AsyncIterator[RedisServer]:
    server = RedisServer(redis_binary(), tmp_path)
    try:
        await server.start()
        yield server
    finally:
        server.close()


@pytest.fixture(params=["memory", "redis"])
async def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[object]:
    """A factory of stores that share one data set (two replicas' views of the same store)."""
    if request.param == "memory":
        shared = MemoryStore()
        yield lambda: shared
        return
    server = RedisServer(redis_binary(), tmp_path)
    prefix = f"t{secrets.token_hex(3)}"
    opened: list[RedisStore] = []

    def make() -> ClusterStore:
        store = RedisStore(server.url, prefix=prefix)
        opened.append(store)
        return store

    try:
        await server.start()
        yield make
    finally:
        for store in opened:
            await store.aclose()
        server.close()
