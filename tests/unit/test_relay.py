"""The relay's parts, in isolation: its bounds at N and N+1 (I18), the sealed request state,
capability checks, the peer switch, and the held-exchange TTL."""

from __future__ import annotations

from types import MappingProxyType, SimpleNamespace
from typing import Any

import anyio
import mcp_types as types
import pytest

from mcp_reconciler.api.frontdoor.capabilities import missing_from
from mcp_reconciler.api.frontdoor.exchanges import Exchange, Exchanges
from mcp_reconciler.api.frontdoor.logs import QUEUE, Bucket, LogRelay, admits, renamed
from mcp_reconciler.api.frontdoor.relay import Call, RelayError
from mcp_reconciler.api.frontdoor.rounds import StateSeal
from mcp_reconciler.reconciler.model import EntryKind
from mcp_reconciler.reconciler.peer import PeerSwitch

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_its_burst_then_refills_at_its_rate() -> None:
    clock = Clock()
    bucket = Bucket(rate=10.0, burst=5, clock=clock, tokens=5)
    assert [bucket.take() for _ in range(5)] == [True] * 5  # N
    assert bucket.take() is False  # N + 1
    clock.now += 0.1  # one token's worth
    assert bucket.take() is True
    assert bucket.take() is False
    clock.now += 100  # never more than the burst
    assert sum(bucket.take() for _ in range(10)) == 5


def test_levels_and_logger_names() -> None:
    assert admits(None, "debug") and admits("warning", "error") and admits("warning", "warning")
    assert not admits("warning", "info")
    rec = types.LoggingMessageNotificationParams(level="info", logger=None, data="x")
    assert renamed("src", rec).logger == "src"
    assert renamed("src", rec.model_copy(update={"logger": "w"})).logger == "src/w"
    assert len(renamed("s", rec.model_copy(update={"logger": "x" * 1000})).logger or "") == 256


def _generation() -> Any:
    entry = SimpleNamespace(source="up")
    routes = {kind: {} for kind in EntryKind}
    routes[EntryKind.TOOL] = {"up__a": entry}
    return SimpleNamespace(revision=1, routes=routes, routes_for=lambda view: routes, source_state=lambda s: None)


def test_broadcast_queue_is_bounded_per_session() -> None:
    """A session that cannot keep up keeps its newest QUEUE records; the (N+1)th drops the oldest."""
    generation = _generation()
    catalog = SimpleNamespace(
        current=lambda: SimpleNamespace(generation=generation), on_publish=lambda cb: lambda: None
    )
    session = SimpleNamespace(id="s1", grants=MappingProxyType({"tool:up__a": "d"}), view=None)
    binding = SimpleNamespace(era="legacy", conn=object(), log_level=None, session=session, key="k1")
    sessions = SimpleNamespace(bindings={"k1": binding})
    relay = LogRelay(catalog, sessions, can_push=lambda b: True)  # type: ignore[arg-type]
    started: list[Any] = []
    relay._tg = SimpleNamespace(start_soon=lambda *a: started.append(a))  # type: ignore[assignment]
    relay._buckets["k1"] = Bucket(rate=0, burst=10_000, tokens=10_000)
    for i in range(QUEUE):  # N
        relay._broadcast("up", types.LoggingMessageNotificationParams(level="info", data=i))
    queue = relay._queues["k1"]
    assert len(queue) == QUEUE and queue[0].data == 0
    relay._broadcast("up", types.LoggingMessageNotificationParams(level="info", data=QUEUE))  # N + 1
    assert len(queue) == QUEUE and queue[0].data == 1 and queue[-1].data == QUEUE
    assert len(started) == 1  # one pump per session, not one per record
    relay._broadcast("other", types.LoggingMessageNotificationParams(level="info", data="x"))
    assert queue[-1].data == QUEUE  # a source the session has not granted never reaches it


def _exchange(session_id: str) -> Exchange:
    return Exchange(session_id, EntryKind.TOOL, "t", 1, False, 60.0)


def test_parked_exchanges_are_bounded_per_session_and_in_all() -> None:
    exchanges = Exchanges(SimpleNamespace(), deadline_s=10, parked_per_session=2, parked_max=3)  # type: ignore[arg-type]

    def park(ex: Exchange) -> bool:
        ex.asked["k"] = SimpleNamespace(settle=lambda answer: refused.append(answer))  # type: ignore[assignment]
        ex.unsent.append("k")
        return exchanges._admit(ex)

    refused: list[Any] = []
    assert park(_exchange("a")) and park(_exchange("a"))  # N per session
    assert not park(_exchange("a"))  # N + 1: its request is refused, the call goes on
    assert refused[-1].data["code"] == "too_many_exchanges"
    assert park(_exchange("b"))  # N in all
    assert not park(_exchange("c"))  # N + 1 in all
    assert exchanges.parked() == 3 and exchanges.parked("a") == 2


async def test_a_parked_exchange_expires_and_cancels_its_upstream_call() -> None:
    ex = Exchange("s", EntryKind.TOOL, "t", 1, False, ttl_s=0.05)
    with anyio.CancelScope() as scope:
        ex.scope = scope
        answer = await ex.ask(types.ListRootsRequest())
    assert isinstance(answer, types.ErrorData) and answer.data == {"code": "input_timeout"}
    assert scope.cancel_called  # the held upstream call is cancelled with it


async def test_an_answered_exchange_hands_the_answer_to_the_waiting_request() -> None:
    ex = Exchange("s", EntryKind.TOOL, "t", 1, False, ttl_s=10)
    got: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def ask() -> None:
            got.append(await ex.ask(types.ListRootsRequest()))

        tg.start_soon(ask)
        with anyio.fail_after(5):
            while not ex.unsent:
                await ex.changed.wait()
        key = ex.unsent.pop()
        ex.sent.add(key)
        ex.answer({})  # answered nothing: asked again
        assert ex.unsent == [key]
        ex.sent.add(ex.unsent.pop())
        ex.answer({key: types.ListRootsResult(roots=[])})
    assert got == [types.ListRootsResult(roots=[])]


def test_sealed_state_opens_only_for_its_session_and_unchanged() -> None:
    seal = StateSeal()
    state = seal.seal("s1", "up", 7, "opaque-upstream-state")
    opened = seal.open("s1", state)
    assert (opened.source, opened.revision, opened.upstream_state) == ("up", 7, "opaque-upstream-state")
    assert "opaque-upstream-state" not in state  # not readable at a glance (base64), never inspected
    for bad in (
        lambda: seal.open("s2", state),  # another session replays it
        lambda: seal.open("s1", state[:-2] + "AA"),  # tampered MAC
        lambda: seal.open("s1", state.replace(".", "x.", 1)),  # tampered payload
        lambda: seal.open("s1", "gw1.s.garbage"),
        lambda: StateSeal().open("s1", state),  # another process's key
    ):
        with pytest.raises(RelayError) as exc:
            bad()
        assert exc.value.error.code == -32031


def test_capability_checks() -> None:
    sampling = types.CreateMessageRequest(params=types.CreateMessageRequestParams(messages=[], max_tokens=1))
    with_tools = types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[], max_tokens=1, tools=[types.Tool(name="t", input_schema={})]
        )
    )
    form = types.ElicitRequest(params=types.ElicitRequestFormParams(message="m", requested_schema={"type": "object"}))
    url = types.ElicitRequest(params=types.ElicitRequestURLParams(message="m", url="https://x", elicitation_id="e"))
    roots = types.ListRootsRequest()
    none = types.ClientCapabilities()
    assert [missing_from(none, r) for r in (sampling, form, roots)] == ["sampling", "elicitation", "roots"]
    plain = types.ClientCapabilities(sampling=types.SamplingCapability(), elicitation=types.ElicitationCapability())
    assert missing_from(plain, sampling) is None
    assert missing_from(plain, with_tools) == "sampling.tools"
    assert missing_from(plain, form) is None  # {} means form (2025-06-18 clients)
    assert missing_from(plain, url) == "elicitation.url"
    url_only = types.ClientCapabilities(elicitation=types.ElicitationCapability(url=types.UrlElicitationCapability()))
    assert missing_from(url_only, form) == "elicitation.form"
    assert missing_from(url_only, url) is None


async def test_a_call_settles_only_after_its_deliveries() -> None:
    call = Call(binding=SimpleNamespace(), ctx=None, connection_id="c")  # type: ignore[arg-type]
    await call.settle()  # nothing pending: no wait
    call.begin_delivery()
    settled = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def settle() -> None:
            await call.settle()
            settled.set()

        tg.start_soon(settle)
        await anyio.wait_all_tasks_blocked()
        assert not settled.is_set()
        call.end_delivery()
    assert settled.is_set()


async def test_the_peer_switch_refuses_while_nothing_is_attached() -> None:
    switch = PeerSwitch()
    conn: Any = SimpleNamespace(source="src")
    answer = await switch.on_request(
        conn, types.CreateMessageRequest(params=types.CreateMessageRequestParams(messages=[], max_tokens=1)), 1
    )
    assert isinstance(answer, types.ErrorData) and answer.data == {"code": "no_downstream"}
    roots = await switch.on_request(conn, types.ListRootsRequest(), 2)
    assert isinstance(roots, types.ErrorData) and roots.data == {"code": "no_roots"}

    class Peer:
        async def on_request(self, conn: Any, request: Any, request_id: Any) -> Any:
            return types.ListRootsResult(roots=[])

        async def on_log(self, conn: Any, params: Any) -> None: ...

        async def on_notification(self, conn: Any, notification: Any) -> None: ...

    detach = switch.attach(Peer())
    with pytest.raises(RuntimeError):
        switch.attach(Peer())  # never two answerers
    assert await switch.on_request(conn, types.ListRootsRequest(), 3) == types.ListRootsResult(roots=[])
    detach()
    detach()  # idempotent
    assert not switch.attached
