"""Rate and concurrency limits (issue 30, ADR 0033): token buckets at N and N+1, all-or-none
across a call's buckets, per-scope isolation, the concurrency gate's slots, queue bound and queue
timeout, policy swaps, and the config keys (errors name file, line and key)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mcp_reconciler.reconciler.config import ConfigError, load_config
from mcp_reconciler.reconciler.errors import ConcurrencyLimitedError, RateLimitedError
from mcp_reconciler.reconciler.limiter import Limiter
from mcp_reconciler.reconciler.model import EntryKind
from mcp_reconciler.reconciler.rate_limits import (
    ConcurrencyRule,
    LimitPolicy,
    RateLimitsConfig,
    RateRule,
    Scope,
    parse_rate,
)
from mcp_reconciler.reconciler.token_bucket import PRUNE_AT, BucketSpec, BucketTable

pytestmark = pytest.mark.anyio
TOOL = EntryKind.TOOL


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limiter(*rules: RateRule, concurrency: tuple[ConcurrencyRule, ...] = ()) -> tuple[Limiter, Clock]:
    clock = Clock()
    lim = Limiter(clock=clock)
    lim.set_policy(LimitPolicy(rates=rules, concurrency=concurrency))
    return lim, clock


async def refused(lim: Limiter, session: str = "s1", principal: str = "owner::a", name: str = "up__a",
                  source: str = "up") -> RateLimitedError | None:  # fmt: skip
    try:
        await lim.take(session, principal, TOOL, name, source)
    except RateLimitedError as exc:
        return exc
    return None


async def test_I24_a_burst_of_n_is_admitted_and_call_n_plus_1_refused_naming_the_limit() -> None:
    for n in (1, 5, 20):
        lim, clock = limiter(RateRule("per-session", Scope.SESSION, rate=2.0, burst=float(n)))
        for _ in range(n):
            assert await refused(lim) is None
        exc = await refused(lim)
        assert exc is not None and exc.limit == "per-session" and exc.code == "rate_limited"
        assert exc.retry_after_s == pytest.approx(0.5)  # one token at 2/s
        clock.now += 0.49
        assert await refused(lim) is not None
        clock.now += 0.02
        assert await refused(lim) is None  # the token the retry-after promised
        assert await refused(lim) is not None


async def test_I24_one_sessions_limit_does_not_touch_another_and_scopes_key_as_named() -> None:
    rules = (
        RateRule("session", Scope.SESSION, rate=1.0, burst=2),
        RateRule("principal", Scope.PRINCIPAL, rate=1.0, burst=3),
    )
    lim, _ = limiter(*rules)
    assert await refused(lim, "s1", "owner::a") is None
    assert await refused(lim, "s1", "owner::a") is None
    assert (await refused(lim, "s1", "owner::a")).limit == "session"  # type: ignore[union-attr]
    # Another session of the same principal: its own session bucket, the principal's third token.
    assert await refused(lim, "s2", "owner::a") is None
    assert (await refused(lim, "s2", "owner::a")).limit == "principal"  # type: ignore[union-attr]
    # Another principal is untouched by either.
    for _ in range(2):
        assert await refused(lim, "s3", "owner::b") is None

    by_name, _ = limiter(RateRule("name", Scope.NAME, rate=1.0, burst=1, match=("up__*",)))
    assert await refused(by_name, name="up__a") is None
    assert await refused(by_name, name="up__a") is not None
    assert await refused(by_name, name="up__b") is None  # each matched name its own bucket
    assert await refused(by_name, name="other__a") is None  # not matched: unlimited
    assert await refused(by_name, name="other__a") is None

    glob_total, _ = limiter(RateRule("glob", Scope.TOTAL, rate=1.0, burst=2, match=("up__*",)))
    assert await refused(glob_total, "s1", name="up__a") is None
    assert await refused(glob_total, "s2", name="up__b") is None
    assert (await refused(glob_total, "s3", name="up__c")).limit == "glob"  # type: ignore[union-attr]

    by_source, _ = limiter(RateRule("src", Scope.SOURCE, rate=1.0, burst=1, sources=("paid",)))
    assert await refused(by_source, source="paid") is None
    assert await refused(by_source, source="paid") is not None
    assert await refused(by_source, source="free") is None


async def test_I24_a_refused_call_spends_no_token_of_its_other_buckets() -> None:
    lim, _ = limiter(
        RateRule("total", Scope.TOTAL, rate=1.0, burst=3),
        RateRule("session", Scope.SESSION, rate=1.0, burst=1),
    )
    assert await refused(lim, "s1") is None
    for _ in range(10):  # s1 is over its own limit: these must not drain the total bucket
        assert (await refused(lim, "s1")).limit == "session"  # type: ignore[union-attr]
    assert await refused(lim, "s2") is None
    assert await refused(lim, "s3") is None
    assert (await refused(lim, "s4")).limit == "total"  # type: ignore[union-attr]


async def test_the_refusal_names_the_limit_that_refuses_longest() -> None:
    lim, _ = limiter(
        RateRule("fast", Scope.SESSION, rate=10.0, burst=1),
        RateRule("slow", Scope.SESSION, rate=0.1, burst=1),
    )
    assert await refused(lim) is None
    exc = await refused(lim)
    assert exc is not None and exc.limit == "slow" and exc.retry_after_s == pytest.approx(10.0)


async def test_kinds_filter_which_operations_count() -> None:
    lim, _ = limiter(RateRule("tools", Scope.TOTAL, rate=1.0, burst=1, kinds=frozenset({EntryKind.TOOL})))
    for _ in range(3):
        await lim.take("s", "p", EntryKind.RESOURCE, "up://x", "up")
        await lim.take("s", "p", EntryKind.PROMPT, "up__p", "up")
    await lim.take("s", "p", TOOL, "up__a", "up")
    with pytest.raises(RateLimitedError):
        await lim.take("s", "p", TOOL, "up__a", "up")


async def test_I24_a_policy_swap_changes_limits_and_keeps_spent_buckets() -> None:
    lim, clock = limiter()
    for _ in range(50):
        assert await refused(lim) is None  # no rule: unlimited
    lim.set_policy(LimitPolicy(rates=(RateRule("r", Scope.SESSION, rate=1.0, burst=2),)))
    assert await refused(lim) is None and await refused(lim) is None
    assert await refused(lim) is not None
    # Reloaded with a larger burst: the spent bucket is kept (a reload hands out no fresh burst)
    # and refills to the new capacity.
    lim.set_policy(LimitPolicy(rates=(RateRule("r", Scope.SESSION, rate=1.0, burst=4),)))
    assert await refused(lim) is not None
    clock.now += 10
    for _ in range(4):
        assert await refused(lim) is None
    assert await refused(lim) is not None
    lim.set_policy(LimitPolicy())
    assert await refused(lim) is None


def test_full_buckets_are_pruned_so_the_table_is_bounded_by_recently_active_keys() -> None:
    clock = Clock()
    table = BucketTable(clock)
    for i in range(PRUNE_AT):
        assert table.take([BucketSpec(f"k{i}", rate=10.0, burst=1)]) is None
    assert len(table) == PRUNE_AT
    clock.now += 0.2  # every bucket refilled (1 token at 10/s)
    assert table.take([BucketSpec("new", rate=10.0, burst=1)]) is None  # past the threshold: prune
    assert len(table) == 1


def test_rate_strings_and_config_errors() -> None:
    assert parse_rate("10/s") == (10.0, 10.0)
    assert parse_rate("600/min") == (10.0, 600.0)
    assert parse_rate("36/h") == (0.01, 36.0)
    assert parse_rate(2.5) == (2.5, 3.0)
    for bad in ("10", "x/s", "0/s", "10/week", 0, -1, True):
        with pytest.raises(ValueError):
            parse_rate(bad)
    policy = RateLimitsConfig.model_validate(
        {"rules": [{"name": "a", "scope": "session", "rate": "60/min"}], "concurrency": [{"name": "c", "max": 2}]}
    ).policy()
    assert policy.rates[0].rate == 1.0 and policy.rates[0].burst == 60.0
    assert policy.concurrency_for("anything") is policy.concurrency[0]


def test_a_bad_limit_is_a_config_error_naming_file_line_and_key(tmp_path: Path) -> None:
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(
        "sources: []\nrate_limits:\n  rules:\n    - name: a\n      scope: session\n      rate: 10/fortnight\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    text = str(err.value)
    assert "gw.yaml:6" in text and "rate" in text, text
    cfg.write_text(
        "rate_limits:\n  rules:\n    - {name: a, scope: total, rate: 1/s}\n  concurrency:\n    - {name: a, max: 1}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert "used twice" in str(err.value) and "gw.yaml:1" in str(err.value), str(err.value)
    cfg.write_text("rate_limits:\n  rules:\n    - {name: a, scope: total, rate: 1/day, burst: 2}\n")
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    assert "refill within a day" in str(err.value)
    cfg.write_text("rate_limits:\n  fail: open\n  rules:\n    - {name: a, scope: principal, rate: 5/s, burst: 7}\n")
    loaded = load_config(cfg)
    assert loaded.limits.fail.value == "open" and loaded.limits.rates[0].burst == 7


@pytest.mark.parametrize("key", ["rules", "concurrency"])
def test_rules_and_concurrency_rules_are_bounded_at_n_and_n_plus_1(key: str, tmp_path: Path) -> None:
    """DESIGN §6: at most 64 rate rules and 64 concurrency rules, refused naming file, line and key."""
    rule = "{name: r%d, scope: total, rate: 1/s}" if key == "rules" else "{name: r%d, max: 1}"

    def config(n: int) -> Path:
        cfg = tmp_path / f"{key}{n}.yaml"
        cfg.write_text(f"rate_limits:\n  {key}:\n" + "".join(f"    - {rule % i}\n" for i in range(n)))
        return cfg

    loaded = load_config(config(64)).limits
    assert len(loaded.rates if key == "rules" else loaded.concurrency) == 64
    with pytest.raises(ConfigError) as err:
        load_config(config(65))
    assert f"{key}65.yaml:2: rate_limits.{key}: " in str(err.value) and "64" in str(err.value), str(err.value)


# -- concurrency ----------------------------------------------------------------------------------


async def test_I24_concurrency_cap_runs_max_queues_the_bound_then_refuses() -> None:
    rule = ConcurrencyRule("paid-inflight", max=2, queue=1, queue_timeout_s=30, sources=("paid",))
    lim = Limiter()
    lim.set_policy(LimitPolicy(concurrency=(rule,)))
    release = anyio.Event()
    running: list[int] = []
    done: list[int] = []

    async def call(i: int) -> None:
        async with lim.slot("paid"):
            running.append(i)
            await release.wait()
            done.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(2):  # N = max: both run
            tg.start_soon(call, i)
        await anyio.wait_all_tasks_blocked()
        gate = lim.gate("paid-inflight", "paid")
        assert gate is not None and gate.in_flight == 2 and running == [0, 1]
        tg.start_soon(call, 2)  # max + 1: queued (the queue holds 1)
        await anyio.wait_all_tasks_blocked()
        assert gate.waiting == 1 and running == [0, 1]
        with pytest.raises(ConcurrencyLimitedError) as err:  # max + queue + 1: refused at once
            async with lim.slot("paid"):
                pass
        assert err.value.limit == "paid-inflight" and not err.value.waited and err.value.retry_after_s > 0
        async with lim.slot("free"):  # another source is not capped by this rule
            pass
        release.set()
    assert sorted(done) == [0, 1, 2] and gate.in_flight == 0 and gate.waiting == 0


async def test_a_queued_call_is_refused_at_its_queue_timeout_and_a_cancelled_one_frees_its_place() -> None:
    lim = Limiter()
    lim.set_policy(LimitPolicy(concurrency=(ConcurrencyRule("c", max=1, queue=1, queue_timeout_s=0.05),)))
    hold = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def holder() -> None:
            async with lim.slot("up"):
                await hold.wait()

        tg.start_soon(holder)
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(ConcurrencyLimitedError) as err:
            async with lim.slot("up"):
                pass
        assert err.value.waited
        gate = lim.gate("c", "up")
        assert gate is not None and gate.waiting == 0
        with anyio.move_on_after(0.01):  # cancelled while queued
            async with lim.slot("up"):
                pass
        assert gate.waiting == 0 and gate.in_flight == 1
        hold.set()
    assert gate.in_flight == 0


async def test_a_reloaded_concurrency_rule_resizes_the_gate_in_place() -> None:
    lim = Limiter()
    lim.set_policy(LimitPolicy(concurrency=(ConcurrencyRule("c", max=1, queue=4),)))
    release = anyio.Event()
    started = 0

    async def call() -> None:
        nonlocal started
        async with lim.slot("up"):
            started += 1
            await release.wait()

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(call)
        await anyio.wait_all_tasks_blocked()
        assert started == 1
        lim.set_policy(LimitPolicy(concurrency=(ConcurrencyRule("c", max=3, queue=4),)))
        await anyio.wait_all_tasks_blocked()
        assert started == 3  # the waiters got the new slots
        gate = lim.gate("c", "up")
        assert gate is not None and gate.in_flight == 3
        release.set()
    assert gate.in_flight == 0
