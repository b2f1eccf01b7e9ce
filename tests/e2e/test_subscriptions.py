"""Resource subscriptions through the gateway, end to end (issue 11, item 4; I17): real upstream
processes in both protocol eras (a 2025-11-25-only server that takes ``resources/subscribe``, a
2026-07-28 server that takes ``subscriptions/listen``) behind the served gateway, downstream
clients in both eras over streamable HTTP on 127.0.0.1.

An update reaches exactly the sessions subscribed to the URI; one upstream subscription serves
every session (reference-counted: the last unsubscribe unsubscribes upstream); a reconnected
upstream is subscribed again; a subscription ends when its URI leaves the session's view; the
capability is advertised only while some source offers it; a session's subscriptions are bounded."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import MCPError

from mcp_reconciler.api.server import serve_http
from tests.e2e.conftest import WAIT, write_config
from tests.e2e.support_resources import (
    UPSTREAM_ARGS,
    Updates,
    held_upstream,
    resource_source,
    session_client,
    subscribe,
    subscribed,
    unsubscribe,
    until,
    until_upstream,
    upstream_subs,
)

pytestmark = pytest.mark.anyio

DOWN = ["legacy", "auto"]
UP = ["legacy", "modern"]


def config(tmp_path: Path, up: str, *extra: str) -> Path:
    return write_config(tmp_path, sources=[resource_source("res", *UPSTREAM_ARGS[up], *extra)])


@pytest.mark.parametrize("up", UP)
@pytest.mark.parametrize("down", DOWN)
async def test_update_reaches_exactly_the_subscribed_sessions(down: str, up: str, tmp_path: Path) -> None:
    async with serve_http(config(tmp_path, up), port=0) as served:
        ua, ub = Updates(), Updates()
        async with session_client(served, down, ua) as a, session_client(served, down, ub) as b:
            caps = a.server_capabilities
            assert caps is not None and caps.resources is not None and caps.resources.subscribe is True
            async with subscribed(a, ["note://a"]) as took_a, subscribed(b, ["note://b"]) as took_b:
                assert (took_a, took_b) == (["note://a"], ["note://b"])
                await until_upstream(a, {"note://a": 1, "note://b": 1})
                with anyio.fail_after(WAIT):
                    await a.call_tool("res__touch", {"uri": "note://a"})
                    await ua.wait_for("note://a")
                    await a.call_tool("res__touch", {"uri": "note://b"})
                    await ub.wait_for("note://b")
                    await a.call_tool("res__touch", {"uri": "note://c"})  # nobody's: goes nowhere
                    await a.call_tool("res__touch", {"uri": "note://a"})
                    await ua.wait_for("note://a", 2)
                assert ua.uris == ["note://a", "note://a"]
                assert ub.uris == ["note://b"]
                direct = sum(bus.direct_frames for bus in served.front.notifier._buses.values())
                if down == "auto":  # over HTTP the frames were handed to the writer directly (listen.py)
                    assert direct >= 1
                else:
                    assert direct == 0


@pytest.mark.parametrize("up", UP)
@pytest.mark.parametrize("down", DOWN)
async def test_one_upstream_subscription_is_shared_and_released_by_the_last(down: str, up: str, tmp_path: Path) -> None:
    async with serve_http(config(tmp_path, up), port=0) as served:
        registry = served.front.subscriptions.upstream
        key = ("res", "note://a")
        ua, ub = Updates(), Updates()
        async with session_client(served, down, ua) as a, session_client(served, down, ub) as b:
            async with subscribed(b, ["note://a"]):
                async with subscribed(a, ["note://a"]):
                    subs = await until_upstream(a, {"note://a": 1})  # one upstream subscription for two
                    if up == "legacy":
                        assert subs["subscribe_calls"] == 1
                    assert registry.refs(key) == 2
                    if down == "legacy":
                        await unsubscribe(a, "note://a")
                # a let go: its unsubscribe (answered after the release), or its listen stream's end
                await until(lambda: registry.refs(key) == 1, what="a's subscription released")
                with anyio.fail_after(WAIT):
                    await a.call_tool("res__touch", {"uri": "note://a"})
                    await ub.wait_for("note://a")  # still held upstream, for b
                assert ua.uris == []
                assert held_upstream(await upstream_subs(a)) == {"note://a": 1}
                if up == "legacy":
                    assert (await upstream_subs(a))["unsubscribe_calls"] == 0
                if down == "legacy":
                    await unsubscribe(b, "note://a")
                    await unsubscribe(b, "note://a")  # twice: still {}
            subs = await until_upstream(a, {})  # the last one: unsubscribed upstream
            await until(lambda: registry.refs(key) == 0, what="b's subscription released")
            if up == "legacy":
                assert (subs["subscribe_calls"], subs["unsubscribe_calls"]) == (1, 1)


@pytest.mark.parametrize("up", UP)
@pytest.mark.parametrize("down", DOWN)
async def test_subscription_survives_an_upstream_reconnect(down: str, up: str, tmp_path: Path) -> None:
    async with serve_http(config(tmp_path, up), port=0) as served:
        updates = Updates()
        async with session_client(served, down, updates) as client:
            async with subscribed(client, ["note://a"]):
                first = await until_upstream(client, {"note://a": 1})
                with pytest.raises(MCPError):
                    await client.call_tool("res__crash", {})  # the stdio upstream dies
                # The gateway respawns it (throttled), publishes a revision with the new
                # connection and subscribes again there: poll the new process until it holds it.

                async def resubscribed() -> bool:
                    try:
                        subs = await upstream_subs(client)
                    except MCPError:  # the new process is not up yet
                        return False
                    return bool(subs["pid"] != first["pid"] and held_upstream(subs) == {"note://a": 1})

                await until(resubscribed, what="the new upstream process to hold the subscription", timeout_s=WAIT)
                await client.call_tool("res__touch", {"uri": "note://a"})
                await updates.wait_for("note://a")


@pytest.mark.parametrize("up", UP)
async def test_subscription_ends_when_the_uri_leaves_the_view(up: str, tmp_path: Path) -> None:
    async with serve_http(config(tmp_path, up), port=0) as served:
        async with session_client(served, "legacy") as client:
            await subscribe(client, "note://a")
            await until_upstream(client, {"note://a": 1})
            session_id = next(iter(served.front.bindings.values())).session.id
            assert served.front.subscriptions.count(session_id) == 1
            # The upstream stops serving note://a (and the template that matched it).
            await client.call_tool("res__set_uris", {"uris": ["note://b"]})
            await until_upstream(client, {})
            assert served.front.subscriptions.count(session_id) == 0


async def test_capability_is_advertised_only_while_a_source_offers_it(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, sources=[resource_source("res", "--no-subscribe")])
    async with serve_http(cfg, port=0) as served:
        for mode in DOWN:
            async with session_client(served, mode) as client:
                caps = client.server_capabilities
                assert caps is not None and caps.resources is not None and caps.resources.subscribe is False
                if mode == "legacy":
                    with pytest.raises(MCPError) as exc:
                        await subscribe(client, "note://a")
                    assert exc.value.code == -32601
                    assert exc.value.error.data["code"] == "subscribe_unsupported"
                else:
                    async with subscribed(client, ["note://a"]) as took:
                        assert took == []  # not acknowledged: nothing would ever arrive


@pytest.mark.parametrize("down", DOWN)
async def test_subscriptions_per_session_are_bounded_at_n_and_n_plus_1(down: str, tmp_path: Path) -> None:
    async with serve_http(config(tmp_path, "modern"), port=0) as served:
        served.front.subscriptions.per_session = 2
        async with session_client(served, down) as client:
            if down == "legacy":
                await subscribe(client, "note://a")
                await subscribe(client, "note://b")  # N
                await subscribe(client, "note://a")  # again: still one subscription
                with pytest.raises(MCPError) as exc:
                    await subscribe(client, "note://c")  # N + 1 (through the template)
                assert exc.value.error.data["code"] == "too_many_subscriptions"
                return
            async with subscribed(client, ["note://a", "note://b"]) as took:
                assert took == ["note://a", "note://b"]
            with pytest.raises(MCPError) as exc:
                async with subscribed(client, ["note://a", "note://b", "note://c"]):
                    pass
            assert exc.value.error.data["code"] == "too_many_subscriptions"


async def test_a_uri_outside_the_view_cannot_be_subscribed(tmp_path: Path) -> None:
    async with serve_http(config(tmp_path, "legacy"), port=0) as served:
        async with session_client(served, "legacy") as client:
            with pytest.raises(MCPError) as exc:
                await subscribe(client, "other://x")  # no resource, no template: unknown (I9)
            assert exc.value.error.data["code"] == "unknown_name"
            assert served.front.subscriptions.upstream.refs(("res", "other://x")) == 0
