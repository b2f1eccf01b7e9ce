"""Exact-name authority (I9) and definition drift (I10) as a downstream client sees them, with
the ``list_changed`` each session gets when — and only when — its own view changes."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_reconciler.api.frontdoor import DRIFT_META
from mcp_reconciler.api.server import Served, serve_http
from tests.e2e.conftest import (
    WAIT,
    Changes,
    Publications,
    all_tools,
    binding_of,
    call_error,
    downstream,
    notifier_caught_up,
    payload,
    tool_names,
    write_config,
)
from tests.support.waits import until

pytestmark = pytest.mark.anyio


async def set_tools(client: Client, served: Served, names: list[str], **descriptions: str) -> int:
    """Change the upstream's catalog (through the gateway) and wait for the new revision."""
    pubs = Publications(served)
    before = pubs.revision
    await client.call_tool("up__set_tools", {"names": names, "descriptions": descriptions})
    return (await pubs.wait_above(before)).revision


# -- I9 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_I9_authority_matrix(mode: str, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, tools=("a", "b"))
    async with serve_http(cfg, port=0) as served, downstream(served.url, mode) as (client, changes):
        binding = await binding_of(served, mode)
        assert {"up__a", "up__b"} <= await tool_names(client)
        assert changes.tools == 0

        # A granted name leaves the catalog: "currently unavailable", retryable — not "unknown".
        rev = await set_tools(client, served, ["b"])
        err = await call_error(client, "up__a")
        assert err.code == -32010 and "currently unavailable" in err.message
        assert err.data["code"] == "currently_unavailable" and err.data["retryable"] is True
        assert "up__a" not in await tool_names(client)
        await changes.wait_tools(1)  # its view changed

        # It reappears: it works again, and the session is told.
        rev = await set_tools(client, served, ["a", "b"])
        assert payload(await client.call_tool("up__a", {"x": "1"}))["tool"] == "a"
        assert "up__a" in await tool_names(client)
        await changes.wait_tools(2)

        # A new upstream name is never added to an existing session (I9).
        rev = await set_tools(client, served, ["a", "b", "c"])
        assert "up__c" not in await tool_names(client)
        unknown = await call_error(client, "up__c")
        never = await call_error(client, "up__nonexistent")
        assert unknown.code == never.code == -32602
        assert unknown.data["code"] == never.data["code"] == "unknown_name"
        assert unknown.message.replace("up__c", "X") == never.message.replace("up__nonexistent", "X")
        # No list_changed for it: once the notifier has compared this session's view at the new
        # revision, nothing is pending or was sent (a delivery in flight would still be pending)...
        await notifier_caught_up(served, [binding], rev)
        assert not binding.pending and binding.notifications == 2

        # ...and granting it is what adds it; the grant is a view change, so the session is told.
        # That notification is the barrier: one stream, in order, so a spurious notification for
        # the ungranted addition would have arrived before it.
        live = served.gateway.rec.runtime.current
        assert live is not None
        served.front.authority.grant(binding.session, ["up__c"], live.generation)
        served.front.touch()
        assert "up__c" in await tool_names(client)
        assert payload(await client.call_tool("up__c", {}))["tool"] == "c"
        await changes.wait_tools(3)
        assert changes.tools == binding.notifications == 3  # the client saw exactly what was sent

        # Granting a name the catalog does not have grants nothing.
        with pytest.raises(Exception, match="not in the current catalog"):
            served.front.authority.grant(binding.session, ["up__nonexistent"], live.generation)
        assert (await call_error(client, "up__nonexistent")).code == -32602


# -- I10 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize("policy", ["allow", "flag", "quarantine"])
async def test_I10_drift_policy(policy: str, mode: str, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, tools=("a", "b"), gateway={"drift_policy": policy})
    async with serve_http(cfg, port=0) as served, downstream(served.url, mode) as (client, changes):
        binding = await binding_of(served, mode)
        tools, _ = await all_tools(client)
        assert not any((t.meta or {}).get(DRIFT_META) for t in tools)

        # The upstream changes a granted tool's definition (a "rug pull").
        await set_tools(client, served, ["a", "b"], a="now does something else")
        await changes.wait_tools(1)  # the session's view changed in every policy
        listed = {t.name: t for t in (await all_tools(client))[0]}
        assert "up__b" in listed and not (listed["up__b"].meta or {}).get(DRIFT_META)

        if policy == "quarantine":
            assert "up__a" not in listed  # hidden until re-granted
            err = await call_error(client, "up__a")
            assert err.code == -32011 and err.data["code"] == "quarantined"
            # The owner re-grants it: the new definition is accepted, the tool is back, unflagged.
            live = served.gateway.rec.runtime.current
            assert live is not None
            served.front.authority.grant(binding.session, ["up__a"], live.generation)
            served.front.touch()
            await changes.wait_tools(2)
            listed = {t.name: t for t in (await all_tools(client))[0]}
            assert listed["up__a"].description == "now does something else"
            res = await client.call_tool("up__a", {})
            assert payload(res)["tool"] == "a" and DRIFT_META not in (res.meta or {})
            return

        assert listed["up__a"].description == "now does something else"
        res = await client.call_tool("up__a", {"x": "1"})
        assert payload(res)["tool"] == "a"
        other = await client.call_tool("up__b", {})
        assert DRIFT_META not in (other.meta or {})
        if policy == "flag":
            assert res.meta is not None and res.meta[DRIFT_META] is True
            assert (listed["up__a"].meta or {}).get(DRIFT_META) is True
        else:
            assert DRIFT_META not in (res.meta or {})
            assert DRIFT_META not in (listed["up__a"].meta or {})


# -- I9 at scale ---------------------------------------------------------------------------------

N_SESSIONS = 200


async def test_I9_200_sessions_each_get_exactly_their_notifications(tmp_path: Path) -> None:
    """Two waves of legacy HTTP sessions (grant policy ``current``): wave A connects while the
    catalog is {a, b}; then the upstream adds ``c`` — no session's view changes, so nobody is
    told; wave B connects and is granted {a, b, c}. Then the upstream removes ``c``: exactly
    wave B's views change, so each wave-B session gets exactly one tools/list_changed and no
    wave-A session gets any. Finally ``b`` is removed (every view changes): each session gets one
    more, which also serves as the per-stream barrier for anything spurious sent earlier. Then
    ``c`` returns: only wave B is told (a third)."""
    half = N_SESSIONS // 2
    cfg = write_config(tmp_path, tools=("a", "b"))
    async with serve_http(cfg, port=0) as served:
        pubs = Publications(served)
        counters = [Changes() for _ in range(N_SESSIONS)]
        ready = [anyio.Event() for _ in range(N_SESSIONS)]
        done = anyio.Event()

        async def session(i: int) -> None:
            async with Client(served.url, mode="legacy", message_handler=counters[i]):
                ready[i].set()
                await done.wait()

        async def all_streams_open() -> None:
            """Every session is bound and its GET stream (where pushes ride) is open."""
            await until(
                lambda: len(served.front.bindings) >= expected_bindings
                and all(served.front.notifier.can_push(b) for b in served.front.bindings.values()),
                what="every session bound, its GET stream open",
                timeout_s=WAIT,
            )

        started = anyio.current_time()
        async with Client(served.url, mode="legacy") as admin:  # drives the upstream
            admin_binding = await binding_of(served, "legacy")
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for i in range(half):
                        tg.start_soon(session, i)
                    for ev in ready[:half]:
                        await ev.wait()
                    expected_bindings = half + 1
                    await all_streams_open()
                    connected_a = anyio.current_time()

                    rev_c = await set_tools(admin, served, ["a", "b", "c"])  # nobody's view changes
                    await notifier_caught_up(served, list(served.front.bindings.values()), rev_c)

                    for i in range(half, N_SESSIONS):
                        tg.start_soon(session, i)
                    for ev in ready[half:]:
                        await ev.wait()
                    expected_bindings = N_SESSIONS + 1
                    await all_streams_open()
                    wave_b = [b for b in served.front.bindings.values() if "tool:up__c" in b.session.grants]
                    assert len(wave_b) == half

                    await set_tools(admin, served, ["a", "b"])  # c leaves: exactly wave B's views change
                    for c in counters[half:]:
                        await c.wait_tools(1)
                    assert [c.tools for c in counters[:half]] == [0] * half

                    await set_tools(admin, served, ["a"])  # b leaves: every view changes (barrier)
                    for c in counters:
                        await c.wait_tools(1 if c in counters[:half] else 2)
                    # c returns: only wave B (granted c) sees it. The notifier shares one view
                    # per grant set in a pass (ADR 0038): wave B must not get wave A's.
                    await set_tools(admin, served, ["a", "c"])
                    for c in counters[half:]:
                        await c.wait_tools(3)
                    notified = anyio.current_time()
                    bindings = list(served.front.bindings.values())
                    done.set()
        assert [c.tools for c in counters[:half]] == [1] * half
        assert [c.tools for c in counters[half:]] == [3] * half
        # Server side too: exactly one push per view change per session, nothing held back.
        sent = sorted(b.notifications for b in bindings if b is not admin_binding)
        assert sent == [1] * half + [3] * half
        assert not any(c.errors for c in counters)
        # Every session ended (HTTP DELETE): its binding and its gateway session are gone.
        await until(
            lambda: not (served.front.bindings or served.front.authority.sessions()),
            what="every binding and session gone",
            timeout_s=WAIT,
        )
        print(
            f"\n{N_SESSIONS} sessions: wave A connected in {connected_a - started:.1f} s, "
            f"all notified after {notified - started:.1f} s"
        )
        assert pubs.revision == rev_c + 3


async def test_I9_new_era_session_without_listen_holds_no_pending_notification(tmp_path: Path) -> None:
    """A 2026-07-28 client that never opened ``subscriptions/listen`` has nowhere to be told; its
    view change is dropped (its next listen starts from a fresh list), not kept pending, which
    would make the notifier re-scan every session every tick for as long as the client lives."""
    cfg = write_config(tmp_path, tools=("a", "b"))
    async with serve_http(cfg, port=0) as served, Client(served.url, mode="auto") as client:
        assert "up__a" in await tool_names(client)
        binding = await binding_of(served, "auto")
        rev = await set_tools(client, served, ["b"])  # the session's view changes
        await notifier_caught_up(served, [binding], rev)
        await until(lambda: not binding.pending, what="the binding's pending notifications sent", timeout_s=WAIT)
        assert binding.notifications == 0
        assert not served.front.notifier.any_pending()
