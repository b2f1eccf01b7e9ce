"""Rate and concurrency limits end to end (issue 30, ADR 0033): a real gateway over HTTP, a real
stdio upstream, the SDK's client in both eras. Over the limit a call fails with a JSON-RPC error
naming the limit, with a retry-after in the error data's ``_meta``; one session's limit does not
touch another's; a config edit changes the limits without a restart; a source's calls in flight
are capped, a bounded queue waits, the rest is refused."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.api.errors import LIMIT_META, RETRY_AFTER_META
from mcp_reconciler.api.server import Served, serve_http
from mcp_reconciler.reconciler.authority import GrantPolicy, principal_id
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.e2e.conftest import WAIT, call_error, downstream, wait_for_file, write_config
from tests.support.waits import until

pytestmark = pytest.mark.anyio


def config(tmp: Path, limits: dict[str, Any]) -> Path:
    cfg = write_config(tmp, tools=("a",))
    doc = json.loads(cfg.read_text())
    doc["rate_limits"] = limits
    cfg.write_text(json.dumps(doc))
    return cfg


def session_token(served: Served) -> str:
    engine = served.gateway.engine
    live = engine.current
    assert live is not None
    return engine.sessions.create(principal_id("owner", "tests"), live.generation, policy=GrantPolicy.CURRENT).token


@asynccontextmanager
async def client_of(served: Served, token: str, mode: str) -> AsyncIterator[Client]:
    async with mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        async with downstream(streamable_http_client(served.url, http_client=http), mode) as (client, _):
            yield client


def assert_limited(exc: MCPError, code: int, name: str, limit: str) -> float:
    data = exc.error.data
    assert exc.error.code == code and isinstance(data, dict), exc.error
    assert data["code"] == name and data["limit"] == limit and data["retryable"] is True, data
    retry_after = data["_meta"][RETRY_AFTER_META]
    assert data["_meta"][LIMIT_META] == limit and retry_after == data["retry_after_s"] and retry_after > 0, data
    assert limit in exc.error.message
    return float(retry_after)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_I24_a_burst_at_the_boundary_is_refused_per_session_and_a_reload_changes_the_limit(
    mode: str, tmp_path: Path
) -> None:
    burst = 3
    slow = {"rules": [{"name": "per-session", "scope": "session", "rate": "1/h", "burst": burst}]}
    cfg = config(tmp_path, slow)
    async with serve_http(cfg, port=0) as served:
        one, two = session_token(served), session_token(served)
        async with client_of(served, one, mode) as a, client_of(served, two, mode) as b:
            for _ in range(burst):  # N admitted
                assert not (await a.call_tool("up__a", {})).is_error
            retry_after = assert_limited(await call_error(a, "up__a"), -32021, "rate_limited", "per-session")
            assert 3000 < retry_after <= 3600  # one token at 1/h
            # Per-scope isolation: the other session's bucket is full.
            for _ in range(burst):
                assert not (await b.call_tool("up__a", {})).is_error
            assert_limited(await call_error(b, "up__a"), -32021, "rate_limited", "per-session")

            # A config edit applies at the next cycle, no restart; the spent bucket refills at the
            # new rate (10,000/s: at once).
            fast = {"rules": [{"name": "per-session", "scope": "session", "rate": "10000/s", "burst": 5}]}
            config(tmp_path, fast)
            await served.gateway.engine.refresh(timeout_s=WAIT)
            assert served.gateway.engine.limiter.policy.rates[0].burst == 5
            assert not (await a.call_tool("up__a", {})).is_error
            # And removing the rule removes the limit.
            config(tmp_path, {})
            await served.gateway.engine.refresh(timeout_s=WAIT)
            assert served.gateway.engine.limiter.policy.empty
            for _ in range(20):
                assert not (await b.call_tool("up__a", {})).is_error


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_I24_a_sources_calls_in_flight_are_capped_queued_to_the_bound_then_refused(
    mode: str, tmp_path: Path
) -> None:
    limits = {"concurrency": [{"name": "up-inflight", "sources": ["up"], "max": 1, "queue": 1}]}
    cfg = config(tmp_path, limits)
    marker, release = tmp_path / "marker", tmp_path / "release"
    async with serve_http(cfg, port=0) as served:
        token = session_token(served)
        limiter = served.gateway.engine.limiter
        async with client_of(served, token, mode) as client, anyio.create_task_group() as tg:
            results: list[Any] = []

            async def call(args: dict[str, Any]) -> None:
                results.append(await client.call_tool("up__block", args))

            tg.start_soon(call, {"marker": str(marker), "release": str(release)})
            await wait_for_file(marker, WAIT)  # the first call holds the one slot, upstream
            tg.start_soon(call, {"release": str(release)})
            await until(  # the second waits in the queue (state inside the gateway)
                lambda: (g := limiter.gate("up-inflight", "up")) is not None and g.waiting >= 1,
                what="the second call queued",
                timeout_s=WAIT,
            )
            gate = limiter.gate("up-inflight", "up")
            assert gate is not None
            # max + queue + 1: refused at once, naming the limit.
            exc = await call_error(client, "up__a")
            assert_limited(exc, -32022, "concurrency_limited", "up-inflight")
            release.write_text("go")
        assert len(results) == 2 and not any(r.is_error for r in results), results
        assert gate.in_flight == 0 and gate.waiting == 0
