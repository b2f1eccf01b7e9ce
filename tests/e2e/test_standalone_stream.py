"""The 2025-era GET stream on the data plane (``api/plane/era2025.py``): raw 2025-11-25 sessions
over HTTP on 127.0.0.1 against the served gateway with a real resource upstream, so each test
sees the exact bytes on the wire.

What is held: events are SSE ``message`` frames carrying one JSON-RPC notification and leave in
event-id order; a client that resumes with Last-Event-ID gets what it missed; one GET stream per
session (409), and a closed one frees its slot; a client that stops reading holds a bounded
backlog and never blocks the sender."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from mcp_reconciler.api.plane.channel import FrameChannel
from mcp_reconciler.api.plane.sessions import PUSH_BACKLOG, SessionTable
from mcp_reconciler.api.server import Served, serve_http
from tests.e2e.conftest import WAIT, write_config
from tests.e2e.support_resources import UPSTREAM_ARGS, new_token, resource_source, until
from tests.support.raw_mcp import LEGACY, legacy_open

pytestmark = pytest.mark.anyio

ACCEPT = "application/json, text/event-stream"


def resource_updated(uri: str) -> dict[str, Any]:
    """The ``notifications/resources/updated`` message for ``uri`` as the wire carries it."""
    return {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}


class RawSession:
    """A 2025-11-25 session spoken over plain HTTP: initialize, then POSTs and GET streams."""

    def __init__(
        self, http: httpx2.AsyncClient, served: Served, token: str, capabilities: dict[str, Any] | None = None
    ) -> None:
        self.http, self.url = http, served.url
        self.capabilities = capabilities or {}
        self.headers = {"authorization": f"Bearer {token}", "accept": ACCEPT}
        self.sid = ""
        self._ids = iter(range(2, 10_000))

    async def open(self) -> None:
        r = await legacy_open(self.http, self.url, self.headers, capabilities=self.capabilities)
        r.raise_for_status()
        self.sid = r.headers["mcp-session-id"]
        self.headers |= {"mcp-session-id": self.sid, "mcp-protocol-version": LEGACY}

    async def request(self, method: str, params: dict[str, Any]) -> httpx2.Response:
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        r = await self.http.post(self.url, json=body, headers=self.headers)
        r.raise_for_status()
        return r

    @asynccontextmanager
    async def get(self, **extra: str) -> AsyncIterator[httpx2.Response]:
        headers = {**self.headers, "accept": "text/event-stream", **extra}
        async with self.http.stream("GET", self.url, headers=headers) as r:
            yield r


async def events(response: httpx2.Response, n: int) -> list[dict[str, str]]:
    """The next ``n`` SSE events on ``response`` (comment lines skipped), as field → value."""
    out: list[dict[str, str]] = []
    event: dict[str, str] = {}
    with anyio.fail_after(WAIT):
        async for line in response.aiter_lines():
            if not line:
                if event:
                    out.append(event)
                    event = {}
                    if len(out) == n:
                        return out
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(": ")
            event[field] = value
    raise AssertionError(f"the stream ended after {len(out)} of {n} events")


@asynccontextmanager
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[Served, httpx2.AsyncClient]]:
    cfg = write_config(tmp_path, sources=[resource_source("res", *UPSTREAM_ARGS["legacy"])])
    async with serve_http(cfg, port=0) as served, httpx2.AsyncClient(timeout=WAIT) as http:
        yield served, http


async def subscribed_session(served: Served, http: httpx2.AsyncClient) -> RawSession:
    s = RawSession(http, served, new_token(served))
    await s.open()
    await s.request("resources/subscribe", {"uri": "note://a"})
    return s


async def touch(s: RawSession, uri: str = "note://a") -> None:
    await s.request("tools/call", {"name": "res__touch", "arguments": {"uri": uri}})


async def test_updates_leave_in_event_id_order_as_message_frames(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (served, http):
        s = await subscribed_session(served, http)
        async with s.get() as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            assert stream.headers["mcp-session-id"] == s.sid
            for _ in range(3):
                await touch(s)
            got = await events(stream, 3)
        ids = [int(e["id"].rsplit(":", 1)[1]) for e in got]
        assert ids == sorted(ids) and len(set(ids)) == 3
        assert [e["event"] for e in got] == ["message"] * 3
        assert [json.loads(e["data"]) for e in got] == [resource_updated("note://a")] * 3


async def test_a_client_that_resumes_with_last_event_id_misses_nothing(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (served, http):
        manager = served.transport_sessions
        assert manager is not None
        s = await subscribed_session(served, http)
        async with s.get() as stream:
            for _ in range(3):
                await touch(s)
            written = await events(stream, 3)
        await until(lambda: manager.standalone_stream_open(s.sid) is False, what="the closed GET stream freed its slot")
        # Resuming after the first: the store replays the two written after it, ids and all.
        async with s.get(**{"last-event-id": written[0]["id"]}) as resumed:
            assert resumed.status_code == 200
            *replayed, priming = await events(resumed, 3)  # the SDK's resumption: replay, then a priming event
        assert priming["data"] == ""
        assert [(e["id"], e["data"]) for e in replayed] == [(e["id"], e["data"]) for e in written[1:]]
        await until(lambda: manager.standalone_stream_open(s.sid) is False, what="the resumed stream ended")
        for _ in range(2):
            await touch(s)  # held for the session until it has a GET stream again (one update: level-triggered)
        async with s.get(**{"last-event-id": written[-1]["id"]}) as again:
            priming, update = await events(again, 2)  # nothing to replay; the priming event; the held update
        assert priming["data"] == ""
        assert json.loads(update["data"]) == resource_updated("note://a")
        assert int(update["id"].rsplit(":", 1)[1]) > int(written[-1]["id"].rsplit(":", 1)[1])


async def test_one_get_stream_per_session_and_a_closed_one_frees_the_slot(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (served, http):
        manager = served.transport_sessions
        assert manager is not None
        s = await subscribed_session(served, http)
        async with s.get() as first:
            assert first.status_code == 200
            assert manager.standalone_stream_open(s.sid) is True
            async with s.get() as second:
                assert second.status_code == 409
        await until(lambda: manager.standalone_stream_open(s.sid) is False, what="the slot is free")
        async with s.get() as again:
            assert again.status_code == 200
            await touch(s)
            (event,) = await events(again, 1)
            assert json.loads(event["data"]) == resource_updated("note://a")


async def test_a_client_that_stops_reading_holds_a_bounded_backlog_and_never_blocks_the_sender() -> None:
    """A GET stream's channel (as ``SessionTable.open`` makes it) never blocks a push: beyond
    ``PUSH_BACKLOG`` unsent frames, pushes are dropped (I18) — the client re-lists on resume."""
    channel = FrameChannel(None, None, PUSH_BACKLOG, wait=False)
    message = resource_updated("note://a")
    with anyio.fail_after(WAIT):
        for _ in range(PUSH_BACKLOG + 5):
            await channel.notify(message["method"], message["params"])
    assert channel.frames.statistics().current_buffer_used == PUSH_BACKLOG
    held = [channel.frames.receive_nowait() for _ in range(PUSH_BACKLOG)]
    assert all(json.loads(f.split(b"data: ", 1)[1]) == message for f in held)


async def test_pushes_to_an_idle_get_stream_are_written_directly_and_resumable(tmp_path: Path) -> None:
    """Over uvicorn and real sockets: a push to an idle GET stream is written by the pusher
    (``push.DirectStream``, no backlog hop), with its id, and a resume replays it."""
    async with gateway(tmp_path) as (served, http):
        table = served.transport_sessions
        assert isinstance(table, SessionTable)
        s = await subscribed_session(served, http)
        async with s.get() as stream:
            await until(lambda: table.standalone_stream_open(s.sid) is True, what="the GET stream is open")
            push = table.sessions[s.sid].standalone.stream
            assert push is not None
            for _ in range(3):
                await touch(s)
            written = await events(stream, 3)
            assert push.direct_frames == 3  # written by the pusher (push.start_now); nothing was queued
        assert [json.loads(e["data"]) for e in written] == [resource_updated("note://a")] * 3
        await until(lambda: table.standalone_stream_open(s.sid) is False, what="the GET stream ended")
        async with s.get(**{"last-event-id": written[0]["id"]}) as resumed:
            *replayed, priming = await events(resumed, 3)
        assert priming["data"] == ""
        assert [(e["id"], e["data"]) for e in replayed] == [(e["id"], e["data"]) for e in written[1:]]
