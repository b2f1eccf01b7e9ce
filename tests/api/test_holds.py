"""Revision holds over the control API and the SDK's ``pinned()`` runs: a held revision stays
callable while newer ones publish (I4, bounded by the hold's TTL — I5), then retires; a call
pinned to it afterwards is refused with -32012 naming the current revision."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_reconciler.reconciler.errors import RevisionUnavailableError
from mcp_reconciler.reconciler.runtime import LiveState
from mcp_reconciler.sdk import NotFound, ReconcilerClient, TooManyRequests
from mcp_reconciler.sdk.client import REVISION_HEADER
from tests.api.conftest import (
    ALICE,
    OPERATOR_TOKEN,
    WAIT,
    Publications,
    call_error,
    mcp_client,
    revision_of,
    served_gateway,
    tool_names,
    write_config,
)
from tests.support.waits import until

pytestmark = pytest.mark.anyio


def _is_live(served: object, revision: int) -> bool:
    try:
        served.gateway.rec.runtime.get(revision)  # type: ignore[attr-defined]
    except RevisionUnavailableError:
        return False
    return True


async def test_hold_keeps_a_revision_callable_until_it_expires(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        pubs = Publications(served)
        runtime = served.gateway.rec.runtime
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc, mcp_client(served) as mcp:
            n = pubs.revision
            long_hold = await rc.hold(n, ttl_s=600)

            # Two newer publications (the upstream changes its tools; list_changed → new revisions).
            await mcp.call_tool("up__set_tools", {"names": ["a", "b", "c"]})
            await pubs.wait_for(lambda g: "up__c" in g.tools)
            await mcp.call_tool("up__set_tools", {"names": ["a", "b", "c", "d"]})
            latest = (await pubs.wait_for(lambda g: "up__d" in g.tools)).revision
            assert latest >= n + 2

            # N is superseded but held: retiring, pinned by the hold, listed by the API.
            live = runtime.get(n)
            assert live.state is LiveState.RETIRING and live.pins == 1
            gens = await rc.generations()
            states = {g.revision: (g.state, g.pins) for g in gens.generations}
            assert states[n] == ("retiring", 1) and states[latest][0] == "current"
            st = await rc.status()
            assert st.holds == 1 and n in {r.revision for r in st.retiring}
            old_catalog = await rc.catalog(revision=n)
            assert old_catalog.revision == n and "up__c" not in {e.name for e in old_catalog.entries}

            # Still callable, by header and by _meta.
            async with mcp_client(served, headers={REVISION_HEADER: str(n)}) as pinned:
                res = await pinned.call_tool("up__a", {"x": "held"})
                assert revision_of(res) == n and not res.is_error
                assert "up__c" not in await tool_names(pinned)
            res = await mcp.call_tool("up__a", {"x": "meta"}, meta={"io.mcp-reconciler/revision": n})
            assert revision_of(res) == n

            # Expiry: a short hold takes over, the long one is released; N stays live until the
            # short one expires (its pin alone keeps N open), then retires at once.
            short = await rc.hold(n, ttl_s=0.5)
            await rc.release_hold(long_hold.id)
            assert _is_live(served, n) and runtime.get(n).pins == 1
            t0 = anyio.current_time()
            await until(lambda: not _is_live(served, n), timeout_s=WAIT, what=f"revision {n} to retire")
            assert anyio.current_time() - t0 > 0.3  # the hold, not the release, kept it open
            assert (await rc.status()).holds == 0
            with pytest.raises(NotFound):
                await rc.release_hold(short.id)  # expired holds are gone
            with pytest.raises(NotFound):
                await rc.catalog(revision=n)
            with pytest.raises(NotFound):
                await rc.hold(n)  # a retired revision cannot be held again

            # A call pinned to N now: -32012, naming the current revision.
            current = runtime.current_revision
            async with mcp_client(served, headers={REVISION_HEADER: str(n)}) as pinned:
                err = await call_error(pinned, "up__a")
            assert err.code == -32012
            assert f"the current revision is {current}" in err.message
            err = await call_error(mcp, "up__a", meta={"io.mcp-reconciler/revision": n})
            assert err.code == -32012 and str(current) in err.message


async def test_release_retires_a_held_revision_at_once(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        pubs = Publications(served)
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc, mcp_client(served) as mcp:
            n = pubs.revision
            hold = await rc.hold(n, ttl_s=600)
            await mcp.call_tool("up__set_tools", {"names": ["a"]})
            await pubs.wait_above(n)
            assert _is_live(served, n)
            await rc.release_hold(hold.id)
            await until(lambda: not _is_live(served, n), what=f"revision {n} to retire")
            assert [g.revision for g in (await rc.generations()).generations] == [pubs.revision]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_pinned_run_sees_one_revision(mode: str, tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        pubs = Publications(served)
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            n = pubs.revision
            async with rc.pinned(mode=mode) as run:
                assert run.revision == n and run.hold.revision == n
                # The hold names the catalog itself (replica-independent digest); the run sends it.
                assert run.hold.digest == served.gateway.engine.get(n).content_digest
                assert (await rc.status()).holds == 1
                before = await tool_names(run.mcp)
                assert {"up__a", "up__b"} <= before

                # The gateway publishes a new revision mid-run (the upstream adds a tool).
                res = await run.mcp.call_tool("up__set_tools", {"names": ["a", "b", "c"]})
                assert revision_of(res) == n
                newer = (await pubs.wait_for(lambda g: "up__c" in g.tools)).revision
                assert newer > n

                # The run still sees revision n, consistently.
                page = await run.mcp.list_tools(cache_mode="bypass")
                assert revision_of(page) == n
                assert await tool_names(run.mcp) == before
                res = await run.mcp.call_tool("up__a", {"x": "run"})
                assert revision_of(res) == n and not res.is_error
                assert _is_live(served, n)

            # The hold is released on exit; n retires.
            assert (await rc.status()).holds == 0
            await until(lambda: not _is_live(served, n), what=f"revision {n} to retire")


async def test_pinned_releases_the_hold_when_the_body_raises(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            cause = KeyError("why")
            with pytest.raises(RuntimeError, match="agent failed") as raised:
                async with rc.pinned() as run:
                    assert (await rc.status()).holds == 1
                    await run.mcp.call_tool("up__a", {})
                    raise RuntimeError("agent failed") from cause
            # The caller gets its own exception back (not wrapped in the MCP client's exception
            # groups), with its cause intact.
            assert type(raised.value) is RuntimeError and raised.value.__cause__ is cause
            assert (await rc.status()).holds == 0

            # Cancelled from outside: released too.
            entered = anyio.Event()

            async def run_forever() -> None:
                async with rc.pinned(mode="legacy"):
                    entered.set()
                    await anyio.sleep_forever()

            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run_forever)
                    await entered.wait()
                    tg.cancel_scope.cancel()
            assert (await rc.status()).holds == 0

            # Pinning a revision that is not live fails before anything is held.
            with pytest.raises(NotFound):
                async with rc.pinned(revision=10_000):
                    raise AssertionError("unreachable")
            assert (await rc.status()).holds == 0


async def test_holds_cannot_defer_publication_and_status_says_why(tmp_path: Path) -> None:
    # retiring_max 2: holds may keep 1 revision alive (retiring_max - 1), whatever their TTLs.
    async with served_gateway(write_config(tmp_path, gateway={"retiring_max": 2})) as served:
        pubs = Publications(served)
        runtime = served.gateway.rec.runtime
        async with (
            ReconcilerClient(served.base_url, ALICE) as alice,
            ReconcilerClient(served.base_url, OPERATOR_TOKEN) as op,
            mcp_client(served) as mcp,
        ):

            async def publish(*names: str) -> int:
                await mcp.call_tool("up__set_tools", {"names": ["a", "b", *names]})
                return (await pubs.wait_for(lambda g: f"up__{names[-1]}" in g.tools)).revision

            n = pubs.revision
            await alice.hold(n, ttl_s=3600)
            n1 = await publish("c")
            for client in (alice, op):  # the rule binds operators too
                with pytest.raises(TooManyRequests) as refused:
                    await client.hold(n1, ttl_s=3600)
                assert refused.value.code == "hold_slots_full" and "retiring_max 2 - 1" in refused.value.message
            await alice.hold(n, ttl_s=60)  # the held revision may be held again

            # An hour-long hold cannot stop publication: each new revision publishes at once.
            for tool in ("d", "e", "f"):
                await publish("c", tool)
                assert not runtime.pending and not (await op.status()).pending_publication

            # Operations in flight still defer a publication (bounded by the drain deadline, I5);
            # status says so, and why.
            cur = runtime.current
            assert cur is not None
            first = cur.pin()  # an operation in flight on the current revision
            m1 = cur.revision
            m2 = await publish("c", "g")  # m1 retires beside the held n: the retiring set is full
            second = runtime.get(m2).pin()
            await mcp.call_tool("up__set_tools", {"names": ["a", "b", "c", "h"]})
            await until(lambda: runtime.pending is not None, what="the publication to be deferred")
            st = await op.status()
            assert st.pending_publication and st.state == "degraded"
            (cond,) = st.conditions
            assert (cond.type, cond.reason) == ("publication_deferred", "retiring_set_full")
            assert f"revision {n} held for" in cond.message and f"revision {m1} draining" in cond.message
            assert "2 of 2" in cond.message and f"current revision {m2} is pinned" in cond.message
            assert [c.type for c in (await alice.status()).conditions] == ["publication_deferred"]
            ready = await op.readyz()
            assert ready.ready and ready.conditions == ["publication_deferred"]

            first.release()  # m1 drains: the deferred catalog publishes (exactly one retry)
            await pubs.wait_for(lambda g: "up__h" in g.tools)
            st = await op.status()
            assert not st.pending_publication and st.conditions == [] and st.state == "ready"
            second.release()


async def test_a_pinned_run_is_served_only_the_catalog_its_hold_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK sends the hold's digest with the revision; a gateway whose revision n is another
    catalog (here: a hold answer from "another replica", forged) refuses, retryably, instead of
    serving it (issue 13, item 4)."""
    from mcp import MCPError

    async with served_gateway(write_config(tmp_path)) as served:
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            real_hold = rc.hold

            async def other_catalog(revision: int, *, ttl_s: float = 600.0) -> Any:
                hold = await real_hold(revision, ttl_s=ttl_s)
                return hold.model_copy(update={"digest": "0" * 64})

            monkeypatch.setattr(rc, "hold", other_catalog)
            async with rc.pinned(mode="legacy") as run:
                with pytest.raises(MCPError) as refused:
                    await run.mcp.call_tool("up__a", {})
            assert refused.value.error.code == -32012
            data = refused.value.error.data
            assert data["code"] == "revision_unavailable" and data["retryable"] is True, data
