"""Engine events without HTTP: the event log's ids, replay window and close; trigger reasons
recorded by the trigger queue (and kept across a failed batch); the runtime's retirement hook
firing after the publication that caused it; hold events."""

from __future__ import annotations

import anyio
import pytest

from mcp_reconciler.reconciler.catalog import Catalog
from mcp_reconciler.reconciler.events import EngineEvent, EventLog, HoldChanged, Retired, SessionChanged, Trigger
from mcp_reconciler.reconciler.holds import HoldRegistry
from mcp_reconciler.reconciler.runtime import Runtime
from mcp_reconciler.reconciler.workqueue import TriggerQueue
from tests.support.fakes import FakeConnection, catalog, state

pytestmark = pytest.mark.anyio


def test_ids_increase_and_the_replay_window_is_bounded() -> None:
    log = EventLog(replay=3)
    seen: list[EngineEvent] = []
    remove = log.subscribe(seen.append)
    assert log.since(0) == ()
    for _ in range(5):
        log.emit(SessionChanged("grants"))
    assert [e.id for e in seen] == [1, 2, 3, 4, 5] and log.last_id == 5
    assert [e.id for e in log.since(2) or ()] == [3, 4, 5]  # exactly the kept window: no gap
    assert log.since(1) is None  # event 2 is gone: the follower must re-read state
    assert log.since(5) == () and log.since(99) == ()
    remove()
    log.emit(SessionChanged("grants"))
    assert len(seen) == 5


def test_a_failing_subscriber_does_not_stop_the_others_and_close_is_told_once() -> None:
    log = EventLog()
    seen: list[int] = []
    closed: list[str] = []

    def broken(_event: EngineEvent) -> None:
        raise RuntimeError("boom")

    log.subscribe(broken)
    log.subscribe(lambda e: seen.append(e.id), lambda: closed.append("a"))
    log.emit(SessionChanged("grants"))
    log.close()
    log.close()
    assert seen == [1] and closed == ["a"] and log.closed
    log.subscribe(lambda e: None, lambda: closed.append("late"))  # already closed: told at once
    assert closed == ["a", "late"]


async def test_the_queue_records_why_keys_were_marked_and_keeps_them_across_a_failure() -> None:
    queue: TriggerQueue[str] = TriggerQueue(cooldown_s=0.0, retry_max_s=0.0)
    queue.add("files", "watched_file")
    queue.add("up", "list_changed")
    queue.add("up", "list_changed")  # coalesced: one key, one reason
    with anyio.fail_after(5):
        batch = await queue.get()
    assert batch.keys == {"files", "up"} and batch.reasons == {"watched_file", "list_changed"}
    queue.done(batch, "failed", ok=False)
    with anyio.fail_after(5):
        again = await queue.get()
    assert again.keys == batch.keys and again.reasons == {"watched_file", "list_changed", "retry"}
    queue.done(again, "ok", ok=True)
    queue.request(["x"])
    with anyio.fail_after(5):
        assert (await queue.get()).reasons == {"refresh"}


def _catalog(tool: str) -> Catalog:
    return catalog(state("a", [tool], FakeConnection()))


async def test_retirement_is_told_after_the_publication_and_a_hold_release_before_it() -> None:
    async with Runtime() as runtime:
        order: list[str] = []
        runtime.add_listener(lambda new, prev: order.append(f"publish {new.revision} {new.trigger.reasons}"))
        runtime.add_retire_listener(lambda r: order.append(f"retire {r.revision} forced={r.forced}"))
        runtime.publish(_catalog("x"), trigger=Trigger(("startup",), ("all",)))
        runtime.publish(_catalog("y"), trigger=Trigger(("config",), ("config",)))  # rev 1 had no pins
        assert order == ["publish 1 ('startup',)", "publish 2 ('config',)", "retire 1 forced=False"]
        holds = HoldRegistry(runtime)
        changes: list[HoldChanged] = []
        holds.add_listener(changes.append)
        hold = holds.create(2, 60, owner="owner::alice")
        runtime.publish(_catalog("z"))
        holds.release(hold.id)
        assert order[-2:] == ["publish 3 ()", "retire 2 forced=False"]
        assert [(c.change, c.revision, c.owner) for c in changes] == [
            ("added", 2, "owner::alice"),
            ("released", 2, "owner::alice"),
        ]
        assert isinstance(Retired(1, 0.0, None, 0.0), Retired)
