"""``api/frontdoor/listen.py``: a binding's listen streams with frames written directly by the
publisher. The stream under it is the plane's real ``push.DirectStream`` (what
``link.listen_writer`` finds on a listen request's channel) over a recorder ``write`` that can be
held, so a write the transport holds is a state the test sets, not a race it hopes for (the
served path is ``tests/e2e/test_subscriptions.py``)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server._streamable_http_modern import _sse_event
from mcp.shared.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
    event_to_notification,
)

from mcp_reconciler.api.frontdoor.listen import ListenStreams, _Frames, meta_json
from mcp_reconciler.api.plane.push import DirectStream

pytestmark = pytest.mark.anyio

WAIT = 10.0
META = {"io.modelcontextprotocol/subscriptionId": 7}


@pytest.mark.parametrize(
    "event",
    [
        ToolsListChanged(),
        PromptsListChanged(),
        ResourcesListChanged(),
        ResourceUpdated(uri="note://a"),
        ResourceUpdated(uri='note://é\u2028"x"'),
        ResourceUpdated(uri="\x00meta\x00"),  # the placeholder itself: rendered per stream
    ],
)
def test_a_frame_is_the_frame_the_sdk_writes(event: ServerEvent) -> None:
    """The SDK's path: the notification model dumped by ``ServerSession``, re-wrapped and
    serialized by the HTTP writer (``_sse_event``) — byte for byte."""
    data = event_to_notification(event, META).model_dump(by_alias=True, mode="json", exclude_none=True)
    sdk = _sse_event(types.JSONRPCNotification(jsonrpc="2.0", method=data["method"], params=data.get("params")))
    assert _Frames(event).frame(META, meta_json(META)) == sdk


class Writer:
    """A listen request's response: a ``DirectStream`` whose writes land in :attr:`frames`, and
    are held (the client stopped reading) while :attr:`hold` is unset."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.hold = anyio.Event()  # set: writes complete; unset: the next write waits for it
        self.hold.set()
        self.got = anyio.Event()
        self.stream = DirectStream(self._write, lambda frame: (frame,), lambda: True)
        self.stream.ready()
        self.ctx: Any = SimpleNamespace(
            request_id=7,
            channel=SimpleNamespace(stream=self.stream),  # as the plane's ListenChannel names it
            session=SimpleNamespace(send_notification=self._notify),
        )

    async def _write(self, frame: bytes) -> None:
        if not self.hold.is_set():
            await self.hold.wait()
        self.frames.append(json.loads(frame.split(b"data: ", 1)[1]))
        self.got.set()

    async def _notify(self, notification: Any, related_request_id: Any = None) -> None:
        data = notification.model_dump(by_alias=True, mode="json", exclude_none=True)
        await self.stream.write(_sse_event(types.JSONRPCNotification(jsonrpc="2.0", **data)))

    async def wait_frames(self, n: int) -> None:
        with anyio.fail_after(WAIT):
            while len(self.frames) < n:
                self.got = anyio.Event()
                await self.got.wait()

    def uris(self) -> list[str]:
        return [f["params"].get("uri", f["method"]) for f in self.frames[1:]]


async def settled(streams: ListenStreams, w: Writer) -> None:
    """Until the stream is acknowledged with nothing queued and no write in flight."""
    with anyio.fail_after(WAIT):
        while not (all(st.acked and not st.backlog for st in streams._streams) and w.stream.takes_direct()):
            await anyio.wait_all_tasks_blocked()


def listen_params(*uris: str) -> types.SubscriptionsListenRequestParams:
    return types.SubscriptionsListenRequestParams(
        notifications=types.SubscriptionFilter(resource_subscriptions=list(uris), tools_list_changed=True)
    )


async def test_the_ack_is_first_then_frames_in_publish_order_direct_or_queued() -> None:
    streams = ListenStreams()
    w = Writer()
    results: list[Any] = []
    async with anyio.create_task_group() as tg:
        answered = anyio.Event()

        async def serve() -> None:
            results.append(await streams.serve(w.ctx, listen_params("note://a", "note://b")))
            answered.set()

        w.hold = anyio.Event()  # the ack's write is held: the stream is not acknowledged yet
        tg.start_soon(serve)
        with anyio.fail_after(WAIT):  # registered, its ack in flight
            while streams.open_streams == 0:
                await anyio.wait_all_tasks_blocked()
        streams.publish(ResourceUpdated(uri="note://a"))  # before the ack is written: queued
        assert streams.direct_frames == 0
        w.hold.set()
        await w.wait_frames(2)
        assert w.frames[0]["method"] == "notifications/subscriptions/acknowledged"
        await settled(streams, w)
        streams.publish(ResourceUpdated(uri="note://b"))  # idle, nothing queued: written in this call
        assert streams.direct_frames == 1 and len(w.frames) == 3
        w.hold = anyio.Event()  # the client stops reading: the next write is held
        streams.publish(ResourceUpdated(uri="note://a"))  # direct, held; the publisher does not wait
        streams.publish(ResourceUpdated(uri="note://c"))  # not subscribed: nowhere
        streams.publish(ToolsListChanged())  # a write in flight: queued behind it
        streams.publish(ResourceUpdated(uri="note://b"))  # queued behind that, not direct
        assert streams.direct_frames == 2 and len(w.frames) == 3
        w.hold.set()
        await w.wait_frames(6)
        assert w.uris() == ["note://a", "note://b", "note://a", "notifications/tools/list_changed", "note://b"]
        assert all(f["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": 7} for f in w.frames)
        streams.close()  # graceful: the stream answers its result
        with anyio.fail_after(WAIT):
            await answered.wait()
        assert results[0].meta == {"io.modelcontextprotocol/subscriptionId": 7}
        assert streams.open_streams == 0
        tg.cancel_scope.cancel()


async def test_a_stream_whose_client_stops_reading_is_ended_at_the_backlog_bound() -> None:
    """I18: a client that stopped reading never stalls the publisher; its stream holds
    ``max_buffered_events`` waiting events (N, beside the write in flight and the one its task
    holds for after it) and is ended at the N+1st; what was queued is still written, in order,
    before its result once the client reads again."""
    streams = ListenStreams(max_buffered_events=3)
    w = Writer()
    answered = anyio.Event()

    async def serve() -> None:
        await streams.serve(w.ctx, listen_params("note://a"))
        answered.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve)
        await w.wait_frames(1)  # the ack
        await settled(streams, w)
        w.hold = anyio.Event()  # the client stops reading
        with anyio.fail_after(WAIT):
            streams.publish(ResourceUpdated(uri="note://a"))  # direct: held in flight, not waited for
            streams.publish(ResourceUpdated(uri="note://a"))  # queued; its task takes it, waits for the write
            await anyio.wait_all_tasks_blocked()
            for _ in range(3):  # N waiting
                streams.publish(ResourceUpdated(uri="note://a"))
            assert streams.open_streams == 1, "at the bound the stream stays"
            streams.publish(ResourceUpdated(uri="note://a"))  # N+1
            assert streams.open_streams == 0, "the stream past its bound was let go"
            w.hold.set()
            await answered.wait()
        assert len(w.frames) == 1 + 5  # the ack, the write in flight, the one taken, the N queued
        tg.cancel_scope.cancel()


async def test_a_limit_on_open_streams_per_binding() -> None:
    streams = ListenStreams(max_subscriptions=1)
    w, other = Writer(), Writer()
    async with anyio.create_task_group() as tg:
        tg.start_soon(streams.serve, w.ctx, listen_params("note://a"))
        await w.wait_frames(1)
        with pytest.raises(Exception, match="Subscription limit reached"):
            await streams.serve(other.ctx, listen_params("note://a"))
        tg.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("acked", "backlog", "in_flight", "direct"),
    [
        (True, 0, False, True),
        (False, 0, False, False),  # the ack is not written yet: it must stay first
        (True, 1, False, False),  # something queued (or being written from the backlog) is ahead
        (True, 0, True, False),  # a write is in flight (the transport held it): queue behind it
    ],
)
async def test_publish_writes_directly_only_when_nothing_can_be_ahead(
    acked: bool, backlog: int, in_flight: bool, direct: bool
) -> None:
    """The rule that keeps frames in order, state by state (module docstring); a direct frame
    is written within ``publish`` itself."""
    from mcp_reconciler.api.frontdoor.listen import _Stream

    w = Writer()
    backlog_in, backlog_out = anyio.create_memory_object_stream[ServerEvent](8)
    streams = ListenStreams()
    stream = _Stream(
        honored=types.SubscriptionFilter(resource_subscriptions=["note://a"]),
        uris=frozenset({"note://a"}),
        meta=META,
        meta_json=meta_json(META),
        writer=w.stream,
        backlog_in=backlog_in,
        backlog=backlog,
        acked=acked,
    )
    streams._streams.add(stream)
    if in_flight:
        w.hold = anyio.Event()
        w.stream.direct(b"data: {}\r\n\r\n")  # held by the transport: the stream is busy
    streams.publish(ResourceUpdated(uri="note://a"))
    assert streams.direct_frames == int(direct)
    assert len(w.frames) == int(direct)  # written before publish returned
    assert backlog_out.statistics().current_buffer_used == int(not direct)
    assert stream.backlog == backlog + int(not direct)
    w.hold.set()
    w.stream.close()
