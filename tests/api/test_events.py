"""``GET /v1/events`` on a real gateway on 127.0.0.1: order and ids, trigger reasons, retirement,
auth (operators see everything, owners what concerns them), the concurrent-stream bound at N
and N+1, a slow follower dropped at N+1 buffered events (and resuming without loss), replay
and reset, and streams ending when the gateway stops."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jsonschema
import pytest

from mcp_reconciler.api.events import EVENT_MODELS
from mcp_reconciler.api.server import Served
from mcp_reconciler.reconciler.events import SessionChanged
from tests.api.conftest import (
    ALICE,
    BOB,
    OPERATOR_TOKEN,
    WAIT,
    assert_error_shape,
    backdate,
    served_gateway,
    upstream_source,
    write_config,
)
from tests.support.waits import until

pytestmark = pytest.mark.anyio

DOCUMENT = json.loads((Path(__file__).resolve().parents[2] / "api" / "openapi.json").read_text())


@dataclass
class Message:
    event: str
    data: dict[str, Any]
    id: int | None


class Follower:
    """An SSE client over a real HTTP stream: :meth:`next` returns the next message (bounded)."""

    def __init__(self, response: httpx2.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()
        self.ended = False

    async def next(self, timeout_s: float = WAIT) -> Message:
        event, data, ident = "message", "", None
        with anyio.fail_after(timeout_s):
            while True:
                try:
                    line = await self._lines.__anext__()
                except StopAsyncIteration:
                    self.ended = True
                    raise EOFError("the stream ended") from None
                if line == "":
                    if data:
                        return Message(event, json.loads(data), ident)
                    continue
                if line.startswith(":") or line.startswith("retry:"):
                    continue
                key, _, value = line.partition(": ")
                if key == "event":
                    event = value
                elif key == "data":
                    data = value
                elif key == "id":
                    ident = int(value)

    async def until(self, predicate: Any, timeout_s: float = WAIT) -> list[Message]:
        """Messages up to and including the first matching ``predicate``."""
        seen: list[Message] = []
        with anyio.fail_after(timeout_s):
            while True:
                message = await self.next()
                seen.append(message)
                if predicate(message):
                    return seen


@asynccontextmanager
async def follow(served: Served, token: str | None = OPERATOR_TOKEN, **headers: str) -> AsyncIterator[Follower]:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient(base_url=served.base_url, timeout=WAIT) as http:
        async with http.stream("GET", "/v1/events", headers=headers) as response:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            follower = Follower(response)
            hello = await follower.next()
            assert hello.event == "hello" and hello.id is None, hello
            yield follower


def check_documented(message: Message) -> None:
    """Every data line matches its model in the committed OpenAPI document."""
    name = EVENT_MODELS[message.event].__name__
    jsonschema.validate(message.data, {"$ref": f"#/components/schemas/{name}", "components": DOCUMENT["components"]})


def events(served: Served) -> Any:
    return served.gateway.engine.events


async def test_publish_hold_and_retire_arrive_in_order_with_ids_and_reasons(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    async with served_gateway(cfg) as served:
        engine = served.gateway.engine
        first = engine.current_revision
        assert first is not None
        async with follow(served) as stream:
            hold = engine.holds.create(first, 60, owner="operator::operator1")
            cfg.write_text(
                json.dumps({"gateway": {"cooldown_s": 0.05}, "sources": [upstream_source("up", "a", "b", "c")]})
            )
            backdate(cfg)
            got = await stream.until(lambda m: m.event == "publish")
            publish = got[-1]
            assert publish.data["revision"] == first + 1
            assert publish.data["previous"] == first
            assert publish.data["previous_pins"] == 1  # the hold's pin: it keeps draining
            assert publish.data["previous_drain_deadline_at"] > publish.data["published_at"]
            assert "config" in publish.data["trigger"]["reasons"]
            assert "config" in publish.data["trigger"]["keys"]
            engine.holds.release(hold.id)
            rest = await stream.until(lambda m: m.event == "retire")
            seen = [*got, *rest]
            kinds = [m.event for m in seen]
            assert kinds.index("hold") < kinds.index("publish") < len(kinds) - 1
            released = [m for m in rest if m.event == "hold"]
            assert released and released[0].data["change"] == "released"
            retire = rest[-1].data
            assert retire["revision"] == first and retire["forced"] is False and retire["pins_left"] == 0
            ids = [m.id for m in seen]
            assert all(i is not None for i in ids) and ids == sorted(ids) and len(set(ids)) == len(ids)
            for message in seen:
                check_documented(message)
            # A refresh over the API: the next publication says so.
            cfg.write_text(json.dumps({"gateway": {"cooldown_s": 0.05}, "sources": [upstream_source("up", "a")]}))
            backdate(cfg)
            await engine.refresh()
            publish = (await stream.until(lambda m: m.event == "publish"))[-1]
            assert "refresh" in publish.data["trigger"]["reasons"] or "config" in publish.data["trigger"]["reasons"]


async def test_replay_from_zero_shows_startup_and_a_failed_source(tmp_path: Path) -> None:
    broken = {"name": "broken", "stdio": {"command": str(tmp_path / "no-such-program")}}
    async with served_gateway(write_config(tmp_path, sources=[upstream_source("up", "a"), broken])) as served:
        async with follow(served, **{"Last-Event-ID": "0"}) as stream:
            seen = await stream.until(lambda m: m.event == "publish")
            failed = [m.data for m in seen if m.event == "source" and m.data["source"] == "broken"]
            assert failed and failed[0]["state"] == "failed" and failed[0]["last_error"], seen
            assert "no-such-program" not in json.dumps(failed)  # sanitized reason (I12)
            assert seen[-1].data["trigger"]["reasons"] == ["startup"]
            assert seen[-1].id == min(m.id for m in seen if m.id is not None) + len(seen) - 1


async def test_auth_operators_see_all_owners_only_their_own(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        async with httpx2.AsyncClient(base_url=served.base_url, timeout=WAIT) as http:
            for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Bearer {OPERATOR_TOKEN}x"}):
                r = await http.get("/v1/events", headers=headers)
                assert r.status_code == 401
                assert_error_shape(r.json())
            r = await http.post("/v1/events", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
            assert r.status_code == 405 and "GET" in r.headers["allow"]
        engine = served.gateway.engine
        rev = engine.current_revision or 0
        async with follow(served, ALICE) as alice, follow(served, OPERATOR_TOKEN) as operator:
            engine.holds.create(rev, 60, owner="owner::bob")
            engine.sessions.create("owner::bob", None)
            mine = engine.holds.create(rev, 60, owner="owner::alice")
            engine.events.emit(SessionChanged("grants"))
            got = await alice.until(lambda m: m.event == "session")
            assert [(m.event, m.data.get("owner")) for m in got] == [("hold", "owner::alice"), ("session", None)]
            assert got[0].data["hold_id"] == mine.id
            everything = await operator.until(lambda m: m.event == "session" and m.data["change"] == "grants")
            assert [m.event for m in everything] == ["hold", "session", "hold", "session"]
        async with follow(served, BOB) as bob:  # bob sees his own, from replay
            pass
        assert bob.response.status_code == 200


async def test_concurrent_streams_are_bounded_at_n(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        assert served.control is not None
        served.control.events.max_clients = 2
        async with follow(served), follow(served):
            assert served.control.events.clients == 2
            async with httpx2.AsyncClient(base_url=served.base_url, timeout=WAIT) as http:
                r = await http.get("/v1/events", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
                assert r.status_code == 429
                assert r.json()["error"]["code"] == "too_many_streams"
        await until(lambda: not served.control.events.clients, what="every event stream closed", timeout_s=WAIT)
        async with follow(served):  # a slot freed: accepted again
            assert served.control.events.clients == 1


async def test_streams_per_principal_are_bounded_at_n(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        assert served.control is not None
        served.control.events.max_per_principal = 2
        async with follow(served, ALICE), follow(served, ALICE):
            async with httpx2.AsyncClient(base_url=served.base_url, timeout=WAIT) as http:
                r = await http.get("/v1/events", headers={"Authorization": f"Bearer {ALICE}"})
                assert r.status_code == 429
                assert r.json()["error"]["bound"] == "gateway.limits.event_streams_per_principal"
            async with follow(served, BOB), follow(served, OPERATOR_TOKEN):  # others still get theirs
                assert served.control.events.clients == 4


async def test_a_slow_follower_is_dropped_at_n_plus_one_and_resumes_without_loss(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        assert served.control is not None
        served.control.events.buffer = 4
        log = events(served)
        async with follow(served) as stream:
            # N events at once (no await between them): all buffered, all delivered.
            for _ in range(4):
                log.emit(SessionChanged("grants"))
            got = [await stream.next() for _ in range(4)]
            assert [m.event for m in got] == ["session"] * 4
            last = got[-1].id
            assert last is not None
            # N+1 at once: the buffer overflows; the follower is dropped, told where it stopped.
            for _ in range(5):
                log.emit(SessionChanged("grants"))
            dropped = await stream.next()
            assert dropped.event == "dropped" and dropped.data == {"reason": "slow_reader", "last_id": last}
            check_documented(dropped)
            with pytest.raises(EOFError):
                await stream.next()
        assert served.control.events.dropped == 1
        async with follow(served, **{"Last-Event-ID": str(last)}) as resumed:
            replayed = [await resumed.next() for _ in range(5)]
            assert [m.id for m in replayed] == list(range(last + 1, last + 6))


async def test_resuming_from_an_id_no_longer_kept_says_reset(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        log = events(served)
        for _ in range(300):
            log.emit(SessionChanged("grants"))
        async with follow(served, **{"Last-Event-ID": "1"}) as stream:
            reset = await stream.next()
            assert reset.event == "reset" and reset.data == {"last_id": log.last_id}
        async with follow(served, **{"Last-Event-ID": "garbage"}) as stream:
            assert (await stream.next()).event == "reset"


async def test_streams_end_when_the_gateway_stops(tmp_path: Path) -> None:
    with anyio.fail_after(WAIT):
        async with served_gateway(write_config(tmp_path)) as served:
            async with httpx2.AsyncClient(base_url=served.base_url, timeout=WAIT) as http:
                async with http.stream(
                    "GET", "/v1/events", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}
                ) as response:
                    stream = Follower(response)
                    assert (await stream.next()).event == "hello"
                    await served.gateway.engine.aclose()
                    with pytest.raises(EOFError):
                        await stream.next(5.0)
