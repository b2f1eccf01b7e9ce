"""Two or three in-process replicas sharing one store (both implementations): sessions created on
one are used on another, revocations and grants cross over and fire change listeners (which the
front door turns into ``list_changed``), holds made on one keep the revision alive on the others,
the ledger gives every replica the same revision numbers, and a gap in the event log reloads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mcp_reconciler.reconciler.authority import GrantPolicy, principal_id
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.cluster import MemoryStore
from mcp_reconciler.reconciler.cluster.redis_store import RedisStore
from mcp_reconciler.reconciler.cluster.store import ClusterStore
from mcp_reconciler.reconciler.errors import (
    ClusterUnavailableError,
    SessionLimitError,
    UnknownNameError,
)
from mcp_reconciler.reconciler.model import EntryKind
from tests.cluster.inproc import replica
from tests.support.fakes import catalog, state
from tests.support.redis_server import RedisServer, redis_binary

pytestmark = pytest.mark.anyio

Factory = Callable[[], ClusterStore]
T = EntryKind.TOOL
OWNER = principal_id("owner", "alice")


async def test_session_created_on_a_is_used_on_b_and_revoked_from_b(store_factory: Factory) -> None:
    cat = catalog(state("a", ["x", "y"]))
    async with replica("A", store_factory()) as a, replica("B", store_factory()) as b:
        await a.publish(cat)
        await b.publish(cat)
        s = a.authority.create(
            OWNER, a.runtime.current.generation, policy=GrantPolicy.EXPLICIT, names=["a__x"], shared=True
        )  # type: ignore[union-attr]
        await a.sync.commit(s.id)
        await b.until(lambda: b.authority.by_token(s.token) is not None)
        remote = b.authority.by_token(s.token)
        assert remote is not None and remote.id == s.id and remote.owner == OWNER
        gen_b = b.runtime.current.generation  # type: ignore[union-attr]
        assert b.authority.resolve(remote, gen_b, T, "a__x").entry.exposed_name == "a__x"
        with pytest.raises(UnknownNameError):
            b.authority.resolve(remote, gen_b, T, "a__y")
        # Grant on B: A sees it and its change listeners fire (list_changed for bindings).
        before = a.changed[0]
        b.authority.grant(remote, ["a__y"], gen_b)
        await b.sync.commit(s.id)
        await a.until(lambda: s.granted(T, "a__y"))
        assert a.changed[0] > before
        # Revoke on B: A's token stops authenticating.
        b.authority.remove(s.id)
        await b.sync.commit(s.id)
        await a.until(lambda: a.authority.by_token(s.token) is None)
        assert a.authority.get(s.id) is None


async def test_the_session_bound_is_cluster_wide(store_factory: Factory) -> None:
    bounds = Bounds(sessions=1)
    async with replica("A", store_factory(), bounds=bounds) as a, replica("B", store_factory(), bounds=bounds) as b:
        s1 = a.authority.create(OWNER, None, policy=GrantPolicy.NONE, shared=True)
        await a.sync.commit(s1.id)  # N = 1 fits
        # N + 1 on the other replica: refused by its cache if it heard of s1, else by the store.
        with pytest.raises(SessionLimitError):
            s2 = b.authority.create(OWNER, None, policy=GrantPolicy.NONE, shared=True)
            await b.sync.commit(s2.id)
        await b.until(lambda: [s.id for s in b.authority.sessions()] == [s1.id])


async def test_holds_on_a_are_honoured_on_b_and_revisions_agree(store_factory: Factory) -> None:
    c1, c2 = catalog(state("a", ["x"])), catalog(state("a", ["x", "y"]))
    async with replica("A", store_factory()) as a, replica("B", store_factory()) as b:
        r1a, r1b = await a.publish(c1), await b.publish(c1)
        assert r1a.revision == r1b.revision
        info = await a.sync.create_hold(r1a.revision or 0, 60, owner=OWNER, operator=False)
        await b.until(lambda: b.holds.get(info.id) is not None)
        r2a, r2b = await a.publish(c2), await b.publish(c2)
        assert r2a.revision == r2b.revision == (r1a.revision or 0) + 1
        # The held revision stays live on B although superseded there.
        assert b.runtime.get(r1b.revision or 0).generation.digest == c1.digest
        assert b.sync.get_hold(info.id) is not None
        await b.sync.release_hold(info.id)
        await a.until(lambda: a.holds.get(info.id) is None)


async def test_refresh_all_waits_for_every_live_replica(store_factory: Factory) -> None:
    async with (
        replica("A", store_factory()) as a,
        replica("B", store_factory()) as b,
        replica("C", store_factory()) as c,
    ):
        await a.until(lambda: set(a.sync.status().members) >= {"A", "B", "C"})
        result = await a.sync.refresh_all(5.0)
        assert set(result.done) == {"B", "C"} and result.pending == ()
        assert b.refreshes[0] == 1 and c.refreshes[0] == 1 and a.refreshes[0] == 0


async def test_a_gap_in_the_event_log_reloads_the_cache() -> None:
    store = MemoryStore(event_log_max=4)
    async with replica("A", store) as a, replica("B", store) as b:
        ids = []
        for _ in range(3):
            s = a.authority.create(OWNER, None, policy=GrantPolicy.NONE, shared=True)
            await a.sync.commit(s.id)
            ids.append(s.id)
        await b.until(lambda: all(b.authority.get(i) is not None for i in ids))
        # B falls behind past the log's tail: none of these store calls yields to B's reader.
        await store.delete_session(ids[0], origin="A")
        for _ in range(10):
            await store.announce("noise", "n", origin="A")
        await b.until(lambda: b.authority.get(ids[0]) is None)


async def test_an_unreachable_store_fails_closed_and_recovers(tmp_path: Path) -> None:
    server = RedisServer(redis_binary(), tmp_path)
    await server.start()
    try:
        cat = catalog(state("a", ["x"]))
        async with (
            replica("A", RedisStore(server.url, command_timeout_s=0.3), staleness_s=0.6) as a,
            replica("B", RedisStore(server.url, command_timeout_s=0.3), staleness_s=0.6) as b,
        ):
            await a.publish(cat)
            await b.publish(cat)
            s = a.authority.create(OWNER, a.runtime.current.generation, policy=GrantPolicy.CURRENT, shared=True)  # type: ignore[union-attr]
            await a.sync.commit(s.id)
            await b.until(lambda: b.authority.get(s.id) is not None)
            remote = b.authority.get(s.id)
            assert remote is not None
            server.kill()  # kill -9: the data is gone with it
            await b.until(lambda: b.authority.unconfirmed, timeout_s=10)
            assert not b.sync.healthy
            with pytest.raises(ClusterUnavailableError):
                b.authority.resolve(remote, b.runtime.current.generation, T, "a__x")  # type: ignore[union-attr]
            with pytest.raises(ClusterUnavailableError):
                b.sync.require_healthy()
            await server.start()  # empty
            await b.until(lambda: b.sync.healthy and not b.authority.unconfirmed, timeout_s=15)
            await a.until(lambda: a.sync.healthy and not a.authority.unconfirmed, timeout_s=15)
            # Nothing lost: the replicas wrote back what they knew.
            assert b.authority.resolve(remote, b.runtime.current.generation, T, "a__x").entry.exposed_name == "a__x"  # type: ignore[union-attr]
            probe = RedisStore(server.url)
            await probe.connect()
            try:
                assert [r.id for r in await probe.load_sessions()] == [s.id]
            finally:
                await probe.aclose()
    finally:
        server.close()


async def test_a_token_minted_elsewhere_a_moment_ago_is_loaded_once_on_first_use(store_factory: Factory) -> None:
    store = store_factory()
    async with replica("A", store) as a, replica("B", store_factory()) as b:
        s = a.authority.create(OWNER, None, policy=GrantPolicy.NONE, shared=True)
        await a.sync.commit(s.id)
        if isinstance(store, MemoryStore):
            # Deterministic here: nothing yielded to B's reader since the write.
            assert b.authority.by_token(s.token) is None
        loaded = await b.authority.load_token(s.token)
        assert loaded is not None and loaded.id == s.id
        assert b.authority.by_token(s.token) is loaded  # cached from now on
        assert await b.authority.load_token("not-a-token-anyone-minted") is None


async def test_a_write_the_store_did_not_take_is_not_kept_here(tmp_path: Path) -> None:
    server = RedisServer(redis_binary(), tmp_path)
    await server.start()
    try:
        async with replica("A", RedisStore(server.url, command_timeout_s=0.3), staleness_s=5) as a:
            kept = a.authority.create(OWNER, None, policy=GrantPolicy.NONE, shared=True)
            await a.sync.commit(kept.id)
            server.sigstop()
            fresh = a.authority.create(OWNER, None, policy=GrantPolicy.NONE, shared=True)
            with pytest.raises(ClusterUnavailableError):
                await a.sync.commit(fresh.id)
            assert a.authority.get(fresh.id) is None  # never stored: not served from memory either
            kept.pinned_revision = 7
            a.authority.mark_shared(kept)
            with pytest.raises(ClusterUnavailableError):
                await a.sync.commit(kept.id)
            server.sigcont()
            # The unconfirmed change is replaced by the stored record at the next read of it.
            await a.until(lambda: a.sync.healthy)
            await a.sync._load_session(kept.id)
            assert kept.pinned_revision is None and kept.version == 1
    finally:
        server.close()
