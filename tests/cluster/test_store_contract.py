"""The ClusterStore contract, run against both implementations (the in-memory store and Redis on a
real ``redis-server``): compare-and-set versions, the token claim and the cluster-wide session
bound, hold limits (N and N+1), the revision ledger by content, membership, and the event log
(ordered, resumable, gaps detected)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from mcp_reconciler.reconciler.cluster import MemoryStore
from mcp_reconciler.reconciler.cluster.redis_store import RedisStore
from mcp_reconciler.reconciler.cluster.store import (
    ClusterStore,
    HoldLimits,
    HoldRecord,
    SessionRecord,
    StoreUnavailableError,
    StreamGapError,
)
from mcp_reconciler.reconciler.errors import (
    ClusterConflictError,
    GrantError,
    HoldLimitError,
    HoldSlotsError,
    SessionLimitError,
)
from tests.support.redis_server import RedisServer, redis_binary
from tests.support.waits import until

pytestmark = pytest.mark.anyio

Factory = Callable[[], ClusterStore]


def record(sid: str, token_hash: str = "", **extra: object) -> SessionRecord:
    return SessionRecord(
        id=sid, owner="owner::alice", token_hash=token_hash or f"hash-{sid}", created_at=1.0, policy="none", **extra
    )  # type: ignore[arg-type]


async def two(store_factory: Factory) -> tuple[ClusterStore, ClusterStore]:
    a, b = store_factory(), store_factory()
    await a.connect()
    await b.connect()
    return a, b


async def test_sessions_compare_and_set(store_factory: Factory) -> None:
    a, b = await two(store_factory)
    v1 = await a.put_session(record("s1"), expected=0, origin="A", max_sessions=10)
    assert v1 == 1
    seen = await b.get_session("s1")
    assert seen is not None and seen.version == 1 and seen.owner == "owner::alice"
    v2 = await b.put_session(record("s1", grants={"tool:x": "d1"}, version=1), expected=1, origin="B", max_sessions=10)
    assert v2 == 2
    with pytest.raises(ClusterConflictError):  # A still believes version 1
        await a.put_session(record("s1", grants={"tool:y": "d2"}), expected=1, origin="A", max_sessions=10)
    stored = await a.get_session("s1")
    assert stored is not None and dict(stored.grants) == {"tool:x": "d1"} and stored.version == 2
    assert [r.id for r in await a.load_sessions()] == ["s1"]


async def test_token_claim_and_session_bound(store_factory: Factory) -> None:
    a, b = await two(store_factory)
    await a.put_session(record("s1", "tok"), expected=0, origin="A", max_sessions=2)
    with pytest.raises(GrantError):
        await b.put_session(record("s2", "tok"), expected=0, origin="B", max_sessions=2)
    await b.put_session(record("s2", "tok2"), expected=0, origin="B", max_sessions=2)  # N = 2: fits
    with pytest.raises(SessionLimitError):  # N + 1
        await a.put_session(record("s3", "tok3"), expected=0, origin="A", max_sessions=2)
    assert await a.delete_session("s1", origin="A")
    assert not await a.delete_session("s1", origin="A")
    # The token's claim went with the session, and so did its slot.
    await b.put_session(record("s3", "tok"), expected=0, origin="B", max_sessions=2)


async def test_events_are_ordered_and_resumable(store_factory: Factory) -> None:
    a, b = await two(store_factory)
    start = await b.last_event_id()
    await a.put_session(record("s1"), expected=0, origin="A", max_sessions=10)
    await a.delete_session("s1", origin="A")
    events = await b.read_events(start, block_s=0.1)
    assert [(e.kind, e.key, e.origin) for e in events] == [("session", "s1", "A"), ("session_deleted", "s1", "A")]
    assert SessionRecord.from_json(events[0].data).version == 1
    # Resuming from the last id returns only what came after it; a blocking read wakes on a write.
    last = events[-1].id
    got: list[str] = []

    async def reader() -> None:
        got.extend(e.key for e in await b.read_events(last, block_s=5.0))

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await a.announce("refresh", "req-1", origin="A")
    assert got == ["req-1"]


async def test_hold_limits_are_checked_atomically(store_factory: Factory) -> None:
    a, b = await two(store_factory)
    now = time.time()
    limits = HoldLimits(max_holds=3, max_per_owner=2, max_held_revisions=2)

    def hold(hid: str, revision: int, owner: str = "owner::alice") -> HoldRecord:
        return HoldRecord(hid, revision, owner, now, now + 60)

    await a.create_hold(hold("h1", 1), limits=limits, origin="A")
    await b.create_hold(hold("h2", 1), limits=limits, origin="B")  # per owner: N = 2 fits
    with pytest.raises(HoldLimitError):  # N + 1 for that owner
        await a.create_hold(hold("h3", 1), limits=limits, origin="A")
    await a.create_hold(hold("h3", 2, "owner::bob"), limits=limits, origin="A")  # total N = 3
    with pytest.raises(HoldLimitError):  # total N + 1
        await b.create_hold(hold("h4", 2, "owner::carol"), limits=limits, origin="B")
    assert await b.release_hold("h2", origin="B") is not None
    with pytest.raises(HoldSlotsError):  # a third distinct revision would exceed the held-revision slots
        await b.create_hold(hold("h4", 3, "owner::carol"), limits=limits, origin="B")
    assert {h.id for h in await b.list_holds()} == {"h1", "h3"}
    assert await a.release_hold("h2", origin="A") is None


async def test_holds_expire(store_factory: Factory) -> None:
    a, _ = await two(store_factory)
    now = time.time()
    limits = HoldLimits(max_holds=1, max_per_owner=None, max_held_revisions=4)
    await a.create_hold(HoldRecord("h1", 1, "o", now, now + 0.3), limits=limits, origin="A")
    with pytest.raises(HoldLimitError):
        await a.create_hold(HoldRecord("h2", 1, "o", now, now + 60), limits=limits, origin="A")

    async def expired() -> bool:  # expiry is a matter of wall time (the subject): bounded wait for it
        return not await a.list_holds()

    await until(expired, what="the hold's expiry", timeout_s=10)
    await a.create_hold(HoldRecord("h2", 1, "o", time.time(), time.time() + 60), limits=limits, origin="A")


async def test_ledger_numbers_content(store_factory: Factory) -> None:
    a, b = await two(store_factory)
    assert await a.ledger_head() is None
    assert await a.ledger_step("d1", floor=0, origin="A") == 1
    assert await b.ledger_step("d1", floor=0, origin="B") == 1  # same content: same revision
    assert await b.ledger_step("d2", floor=0, origin="B") == 2
    assert await a.ledger_step("d2", floor=1, origin="A") == 2
    assert await a.ledger_step("d1", floor=2, origin="A") == 3  # back to d1: a new head, never reused
    assert await b.ledger_step("d3", floor=10, origin="B") == 11  # never below a replica's own numbers
    assert await a.ledger_head() == (11, "d3")


async def test_membership_expires(store_factory: Factory) -> None:
    a, b = await two(store_factory)
    await a.heartbeat("A", {"revision": 1}, ttl_s=60)
    await b.heartbeat("B", {"revision": 2}, ttl_s=0.2)
    assert {m.replica_id for m in await a.members()} >= {"A"}

    async def b_expired() -> bool:  # a heartbeat's ttl is wall time (the subject)
        return "B" not in {m.replica_id for m in await a.members()}

    await until(b_expired, what="B's heartbeat to expire", timeout_s=10)
    await a.leave("A")
    assert await b.members() == []


async def test_memory_log_gap_is_detected() -> None:
    store = MemoryStore(event_log_max=3)
    start = await store.last_event_id()
    for i in range(5):
        await store.announce("refresh", str(i), origin="A")
    with pytest.raises(StreamGapError):
        await store.read_events(start, block_s=0)


async def test_redis_lost_data_is_a_gap_and_a_new_epoch(tmp_path: Path) -> None:
    server = RedisServer(redis_binary(), tmp_path)
    await server.start()
    store = RedisStore(server.url, command_timeout_s=0.5)
    try:
        await store.connect()
        epoch = await store.epoch()
        await store.announce("refresh", "1", origin="A")
        last = await store.last_event_id()
        server.kill()
        with pytest.raises(StoreUnavailableError):
            await store.read_events(last, block_s=0.1)
        await server.start()  # empty: no persistence
        with pytest.raises(StreamGapError):
            await store.read_events(last, block_s=0.1)
        assert await store.epoch() != epoch
    finally:
        await store.aclose()
        server.close()


async def test_sigstopped_redis_times_out(tmp_path: Path) -> None:
    server = RedisServer(redis_binary(), tmp_path)
    await server.start()
    store = RedisStore(server.url, command_timeout_s=0.3)
    try:
        await store.connect()
        await store.epoch()
        server.sigstop()
        with anyio.fail_after(5), pytest.raises(StoreUnavailableError):
            await store.ledger_step("d", floor=0, origin="A")
    finally:
        server.close()
        await store.aclose()
