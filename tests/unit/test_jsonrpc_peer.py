"""The gateway's own upstream session (``reconciler/jsonrpc_peer.py``, ADR 0037): its bounded
tables at N and N+1, correlation out of order, and the end of the wire — over a message channel
whose other end this test scripts (the upstream's side of the JSON-RPC wire, message by message;
the contract suite runs the same session against real servers)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import MCPError
from mcp.shared.message import SessionMessage

from mcp_reconciler.reconciler import jsonrpc_peer
from mcp_reconciler.reconciler.jsonrpc_peer import StreamSession
from tests.support.waits import until

pytestmark = pytest.mark.anyio

WAIT = 10.0


class Inbound:
    """The connection's side: answers the server's requests once ``release`` is set."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.serving = 0
        self.notifications: list[str] = []

    async def serve(self, request: dict[str, Any]) -> dict[str, Any]:
        self.serving += 1
        await self.release.wait()
        return {"jsonrpc": "2.0", "id": request["id"], "result": {}}

    async def notification(self, message: dict[str, Any]) -> None:
        self.notifications.append(message["method"])


class Upstream:
    """The scripted other end: ``sent`` is what the session wrote, ``say`` writes to it."""

    def __init__(self, to_session: Any, from_session: Any) -> None:
        self._to = to_session
        self._from = from_session

    async def say(self, message: dict[str, Any]) -> None:
        await self._to.send(SessionMessage(types.jsonrpc_message_adapter.validate_python(message)))

    async def heard(self) -> dict[str, Any]:
        item = await self._from.receive()
        dumped: dict[str, Any] = item.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
        return dumped

    async def end(self) -> None:
        await self._to.aclose()


@asynccontextmanager
async def session(inbound: Inbound) -> AsyncIterator[tuple[StreamSession, Upstream]]:
    to_session, read = anyio.create_memory_object_stream[Any](64)
    write, from_session = anyio.create_memory_object_stream[Any](64)
    ended: list[bool] = []
    async with anyio.create_task_group() as tg:
        peer = StreamSession(read, write, inbound, tg, source="up", on_end=lambda: ended.append(True))
        tg.start_soon(peer.run)
        try:
            yield peer, Upstream(to_session, from_session)
        finally:
            tg.cancel_scope.cancel()


async def test_answers_reach_their_callers_whatever_their_order() -> None:
    async with session(Inbound()) as (peer, up):
        results: dict[str, Any] = {}

        async def ask(name: str) -> None:
            results[name] = await peer.request("tools/call", {"name": name})

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, "a")
                first = await up.heard()
                tg.start_soon(ask, "b")
                second = await up.heard()
                await up.say({"jsonrpc": "2.0", "id": 999, "result": {"late": True}})  # nobody waits: dropped
                await up.say({"jsonrpc": "2.0", "id": second["id"], "result": {"for": "b"}})
                await up.say({"jsonrpc": "2.0", "id": first["id"], "result": {"for": "a"}})
    assert results == {"a": {"for": "a"}, "b": {"for": "b"}}


async def test_server_requests_in_flight_are_bounded_at_n_and_n_plus_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonrpc_peer, "MAX_INBOUND", 3)
    inbound = Inbound()
    async with session(inbound) as (_peer, up):
        with anyio.fail_after(WAIT):
            for i in range(1, 4):  # N: all taken
                await up.say({"jsonrpc": "2.0", "id": i, "method": "ping"})
            await until(lambda: inbound.serving >= 3, what="three requests served at once", every_s=0.001)
            await up.say({"jsonrpc": "2.0", "id": 4, "method": "ping"})  # N + 1: refused at once
            refused = await up.heard()
            assert refused["id"] == 4 and refused["error"]["code"] == types.INTERNAL_ERROR
            assert "too many" in refused["error"]["message"]
            inbound.release.set()
            answered = sorted([(await up.heard())["id"] for _ in range(3)])
    assert answered == [1, 2, 3] and inbound.serving == 3


async def test_requests_waiting_for_answers_are_bounded_at_n_and_n_plus_1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonrpc_peer, "MAX_PENDING", 2)
    async with session(Inbound()) as (peer, up):
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for _ in range(2):  # N: both sent
                    tg.start_soon(peer.request, "ping", None)
                ids = [(await up.heard())["id"] for _ in range(2)]
                with pytest.raises(MCPError, match="too many requests in flight"):  # N + 1
                    await peer.request("ping", None)
                for rid in ids:
                    await up.say({"jsonrpc": "2.0", "id": rid, "result": {}})


async def test_progress_queued_for_a_caller_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """One notification in the caller's callback, N queued behind it; the N+1-th is dropped."""
    monkeypatch.setattr(jsonrpc_peer, "MAX_QUEUED_PROGRESS", 2)
    got: list[float] = []
    taken, release = anyio.Event(), anyio.Event()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        got.append(done)
        taken.set()
        await release.wait()

    async with session(Inbound()) as (peer, up):
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                result: list[Any] = []

                async def ask() -> None:
                    result.append(await peer.request("tools/call", {"name": "p"}, on_progress=on_progress))

                tg.start_soon(ask)
                sent = await up.heard()
                token = sent["params"]["_meta"]["progressToken"]

                async def progress(n: int) -> None:
                    params = {"progressToken": token, "progress": n}
                    await up.say({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})

                await progress(1)
                await taken.wait()  # the caller holds 1 in its callback
                for n in (2, 3, 4):  # 2 and 3 queued (N = 2), 4 dropped
                    await progress(n)
                await up.say({"jsonrpc": "2.0", "id": sent["id"], "result": {"done": True}})
                release.set()
    assert got == [1.0, 2.0, 3.0] and result == [{"done": True}]


async def test_the_wires_end_fails_waiting_requests_and_later_ones_at_once() -> None:
    async with session(Inbound()) as (peer, up):
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:

                async def ask() -> None:
                    with pytest.raises(MCPError) as caught:
                        await peer.request("ping", None)
                    assert caught.value.error.code == types.CONNECTION_CLOSED

                tg.start_soon(ask)
                await up.heard()
                await up.end()
            with pytest.raises(Exception) as later:  # ended: refused before anything is written
                await peer.request("ping", None)
            assert peer.ended and later.type.__name__ == "UpstreamUnavailableError"
