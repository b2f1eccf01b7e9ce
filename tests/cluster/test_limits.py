"""Rate limits shared across replicas through a real ``redis-server`` (issue 30, ADR 0033): two
replicas draw from one bucket (N admitted in all, N+1 refused on either), per-session buckets stay
isolated across replicas, and with Redis gone a limited call fails closed (``cluster_unavailable``
naming the limit) or open (admitted, counted) as configured — within the store's command bound,
and without waiting on the store again for every call."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import MCPError

from mcp_reconciler.reconciler.cluster.redis_store import TAKE_TOKENS_TIMEOUT_S, RedisStore
from mcp_reconciler.reconciler.errors import LimitUnavailableError, RateLimitedError
from mcp_reconciler.reconciler.limiter import RETRY_STORE_AFTER_S, Limiter
from mcp_reconciler.reconciler.model import EntryKind
from mcp_reconciler.reconciler.rate_limits import FailMode, LimitPolicy, RateRule, Scope
from tests.cluster.processes import Replica, agent, cluster_config, start_all, write_tools
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.anyio
TOOL = EntryKind.TOOL


@asynccontextmanager
async def replicas(server: RedisServer, policy: LimitPolicy, n: int = 2) -> AsyncIterator[list[Limiter]]:
    """``n`` limiters, each on its own Redis client (as separate replicas are)."""
    async with AsyncExitStack() as stack:
        out = []
        for _ in range(n):
            store = RedisStore(server.url, prefix="lim")
            await store.connect()
            stack.push_async_callback(store.aclose)
            limiter = Limiter(store)
            limiter.set_policy(policy)
            out.append(limiter)
        yield out


async def admitted(limiter: Limiter, session: str = "s1") -> bool:
    try:
        await limiter.take(session, "owner::a", TOOL, "up__a", "up")
    except RateLimitedError:
        return False
    return True


async def test_I24_two_replicas_share_one_bucket_on_redis(redis_server: RedisServer) -> None:
    n = 6
    policy = LimitPolicy(
        rates=(
            RateRule("total", Scope.TOTAL, rate=1 / 3600, burst=n),
            RateRule("session", Scope.SESSION, rate=1 / 3600, burst=2),
        )
    )
    async with replicas(redis_server, policy) as (a, b):
        # Sessions s1..s3, alternating replicas: two calls each fit their session bucket; the
        # shared total admits N in all.
        results = []
        for i in range(n):
            results.append(await admitted((a, b)[i % 2], f"s{i // 2}"))
        assert results == [True] * n
        # N+1, on either replica: the total bucket is shared.
        with pytest.raises(RateLimitedError) as err:
            await a.take("s9", "owner::a", TOOL, "up__a", "up")
        assert err.value.limit == "total" and err.value.retry_after_s > 3000
        assert not await admitted(b, "s8")
        # A session over its own bucket on one replica is over it on the other, and the refusal
        # spent nothing of the others (all or none, in the script).
        assert (await _refusal(b, "s0")).limit in ("session", "total")


async def test_I24_sessions_stay_isolated_across_replicas(redis_server: RedisServer) -> None:
    policy = LimitPolicy(rates=(RateRule("session", Scope.SESSION, rate=1 / 3600, burst=3),))
    async with replicas(redis_server, policy) as (a, b):
        assert [await admitted(x, "one") for x in (a, b, a)] == [True, True, True]
        assert not await admitted(b, "one")
        assert [await admitted(x, "two") for x in (b, a, b)] == [True, True, True]
        assert not await admitted(a, "two")


async def test_I24_a_refusal_on_redis_spends_no_token_of_the_calls_other_buckets(redis_server: RedisServer) -> None:
    policy = LimitPolicy(
        rates=(
            RateRule("total", Scope.TOTAL, rate=1 / 3600, burst=3),
            RateRule("session", Scope.SESSION, rate=1 / 3600, burst=1),
        )
    )
    async with replicas(redis_server, policy) as (a, b):
        assert await admitted(a, "s1")
        for x in (a, b, a, b):  # s1 is over its own limit: these must not drain the total bucket
            assert (await _refusal(x, "s1")).limit == "session"
        assert await admitted(b, "s2") and await admitted(a, "s3")
        assert (await _refusal(b, "s4")).limit == "total"


async def _refusal(limiter: Limiter, session: str) -> RateLimitedError:
    with pytest.raises(RateLimitedError) as err:
        await limiter.take(session, "owner::a", TOOL, "up__a", "up")
    return err.value


@pytest.mark.parametrize("fail", [FailMode.CLOSED, FailMode.OPEN])
async def test_I24_redis_down_fails_closed_or_open_as_configured(redis_server: RedisServer, fail: FailMode) -> None:
    policy = LimitPolicy(rates=(RateRule("session", Scope.SESSION, rate=1 / 3600, burst=1),), fail=fail)
    async with replicas(redis_server, policy, n=1) as (limiter,):
        assert await admitted(limiter)
        assert not await admitted(limiter)
        redis_server.sigstop()  # unreachable: it does not even refuse the connection
        try:
            marks = []
            for _ in range(20):
                marks.append(time.monotonic())
                if fail is FailMode.CLOSED:
                    with pytest.raises(LimitUnavailableError) as err:
                        await limiter.take("s2", "owner::a", TOOL, "up__a", "up")
                    assert err.value.code == "cluster_unavailable" and err.value.limit == "session"
                else:
                    assert await admitted(limiter, "s2")  # open: admitted unchecked
            first, rest = marks[1] - marks[0], time.monotonic() - marks[1]
            # One command bound for the first call (what a busy box adds to a timer allowed); the
            # other 19 do not wait on the store: together they take less than one bound.
            assert first < TAKE_TOKENS_TIMEOUT_S + 2.0, first
            assert rest < TAKE_TOKENS_TIMEOUT_S, rest
        finally:
            redis_server.sigcont()
        # Back: after RETRY_STORE_AFTER_S the store is asked again, and its buckets still hold.
        with anyio.fail_after(RETRY_STORE_AFTER_S + 5):
            while True:
                try:
                    ok = await admitted(limiter, "s1")
                except LimitUnavailableError:
                    ok = None
                if ok is False:
                    break  # refused by the shared bucket again: the store answers
                assert ok is None or fail is FailMode.OPEN
                await anyio.sleep(0.05)  # waiting out the store's retry interval


@pytest.mark.slow
async def test_I24_two_gateway_processes_share_a_rate_limit_through_redis(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    tools = tmp_path / "tools.json"
    write_tools(tools, ["echo"])
    cfg = cluster_config(tmp_path, tools)
    doc = json.loads(cfg.read_text())
    burst = 4
    doc["rate_limits"] = {"rules": [{"name": "everyone", "scope": "total", "rate": "1/h", "burst": burst}]}
    cfg.write_text(json.dumps(doc))
    a, b = Replica("A", tmp_path, cfg, redis_server.url), Replica("B", tmp_path, cfg, redis_server.url)
    try:
        await start_all(a, b)
        created = await a.post("/v1/sessions", {"grant_policy": "explicit", "names": ["up__echo"]})
        assert created.status_code == 201, created.text
        token = created.json()["token"]
        async with agent(a.url, token) as (on_a, _), agent(b.url, token, "2026-07-28") as (on_b, _):
            for i in range(burst):  # N in all, alternating replicas and eras
                assert not (await (on_a, on_b)[i % 2].call_tool("up__echo", {})).is_error
            for client in (on_a, on_b):  # N+1 on either
                with pytest.raises(MCPError) as err:
                    await client.call_tool("up__echo", {})
                data = err.value.error.data
                assert err.value.error.code == -32021 and isinstance(data, dict), err.value.error
                assert data["limit"] == "everyone" and data["_meta"]["io.mcp-reconciler/retry-after-s"] > 3000
    finally:
        a.kill()
        b.kill()
