"""Logging through the gateway: ``logging/setLevel`` per session, upstream records relayed to
the session whose call produced them (and, tied to no call, to every session with the source
granted), filtered by each session's level, named ``<source>[/<logger>]``, and each upstream's
own level set to the most verbose level an interested session asked for."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mcp_reconciler.reconciler.authority import GrantPolicy
from tests.relay.conftest import (
    WAIT,
    Gated,
    Logs,
    RelayUpstreams,
    client,
    gateway,
    payload,
    session_token,
    upstream,
    write_config,
)

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.MCPDeprecationWarning")]


@pytest.mark.parametrize("up_era", ["legacy", "both"])
@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_records_of_a_call_arrive_in_order_before_its_result(
    transport: str, up_era: str, relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    src = await upstream(relay_upstreams, transport, up_era)
    async with gateway(write_config(tmp_path, [src])) as served:
        logs = Logs()
        async with client(served, logging_callback=logs) as c:
            assert payload(await c.call_tool("up__log", {"n": 5, "who": "w", "logger": "worker"})) == {"logged": 5}
            # No wait: every record was relayed before the result was answered.
            assert logs.data() == [f"w {i}" for i in range(5)]
            assert {r.logger for r in logs.records} == {"up/worker"}
            await c.call_tool("up__log", {"n": 1, "who": "plain"})
            assert logs.records[-1].logger == "up"  # no upstream logger: the source alone


@pytest.mark.parametrize("up_era", ["legacy", "both"])
async def test_a_2026_client_gets_records_only_when_its_request_opts_in(
    up_era: str, relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    src = await upstream(relay_upstreams, "http", up_era)
    async with gateway(write_config(tmp_path, [src])) as served:
        quiet, chatty = Logs(), Logs()
        async with client(served, "auto", logging_callback=quiet) as c:
            await c.call_tool("up__log", {"n": 2, "who": "q"})
        async with client(served, "auto", logging_callback=chatty, log_level="warning") as c:
            await c.call_tool("up__log", {"n": 2, "who": "info"})
            await c.call_tool("up__log", {"n": 2, "who": "err", "level": "error"})
        assert quiet.records == []
        assert chatty.data() == ["err 0", "err 1"]  # info is below the opted-in level


async def test_records_of_concurrent_calls_reach_only_their_own_session(
    relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    """I17 for records: both calls are in flight at once (held by a sampling request half-way)."""
    src = await upstream(relay_upstreams, "http", "legacy")
    async with gateway(write_config(tmp_path, [src])) as served:
        gate: list[anyio.Event | int] = [anyio.Event(), 0]
        la, lb = Logs(), Logs()
        async with (
            client(served, logging_callback=la, sampling_callback=Gated("A", gate)) as a,
            client(served, logging_callback=lb, sampling_callback=Gated("B", gate)) as b,
        ):
            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(a.call_tool, "up__log", {"n": 4, "who": "A", "sample_between": True})
                    tg.start_soon(b.call_tool, "up__log", {"n": 4, "who": "B", "sample_between": True})
        assert la.data() == [f"A {i}" for i in range(4)]
        assert lb.data() == [f"B {i}" for i in range(4)]


async def test_set_level_filters_per_session_and_sets_the_upstream_to_the_most_verbose(
    relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    src = await upstream(relay_upstreams, "http", "legacy")
    async with gateway(write_config(tmp_path, [src])) as served:
        warn_logs, debug_logs = Logs(), Logs()
        async with client(served, logging_callback=warn_logs) as w, client(served, logging_callback=debug_logs) as d:
            await w.set_logging_level("warning")
            assert payload(await w.call_tool("up__state", {}))["level"] == "warning"  # set before answering
            await w.call_tool("up__log", {"n": 1, "who": "info"})
            await w.call_tool("up__log", {"n": 1, "who": "error", "level": "error"})
            assert [r.data for r in warn_logs.records if r.logger == "up"] == ["error 0"]

            await d.set_logging_level("debug")
            assert payload(await d.call_tool("up__state", {}))["level"] == "debug"  # the most verbose asked for
            await w.call_tool("up__log", {"n": 1, "who": "info-again"})
            assert "info-again 0" not in warn_logs.data()  # w still filters at warning
            await d.call_tool("up__log", {"n": 1, "who": "dbg", "level": "debug"})
            assert "dbg 0" in debug_logs.data()


async def test_records_tied_to_no_call_reach_every_session_with_the_source_granted(
    relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    """The upstream answers setLevel with a record on its standalone stream, tied to no call."""
    src = await upstream(relay_upstreams, "http", "legacy")
    async with gateway(write_config(tmp_path, [src])) as served:
        granted, other, ungranted = Logs(), Logs(), Logs()
        none = session_token(served, policy=GrantPolicy.NONE)
        async with (
            client(served, logging_callback=granted) as a,
            client(served, logging_callback=other),
            client(served, logging_callback=ungranted, token=none),
        ):
            await a.set_logging_level("info")
            await granted.wait_for(1)
            await other.wait_for(1)  # never set a level: it gets every record
            for logs in (granted, other):
                assert logs.records[0].data == "level set to info"
                assert logs.records[0].logger == "up/levels"
            assert ungranted.records == []  # nothing of that source granted: never a target
