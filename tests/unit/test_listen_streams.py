"""``api/frontdoor/listen.py``: a binding's listen streams with frames handed to the writer
directly. The writer here is a task reading the zero-capacity sink the way the SDK's 2026 HTTP
writer loop does (in memory: the unit under test is the hand-off and its ordering; the served
path is ``tests/e2e/test_subscriptions.py``)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import anyio
import mcp_types as types
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream
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
from tests.support.waits import until

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
        ResourceUpdated(uri="note://é\u2028\"x\""),
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
    """A listen request's session and sink, and the writer loop reading the sink."""

    def __init__(self) -> None:
        self.sink, self._out = anyio.create_memory_object_stream[bytes](0)
        self.frames: list[dict[str, Any]] = []
        self.hold = anyio.Event()  # set: the writer reads; unset: it is "busy"
        self.hold.set()
        self.got = anyio.Event()
        self.ctx: Any = SimpleNamespace(
            request_id=7,
            channel=SimpleNamespace(sink=self.sink),  # as the data plane's LinkedContext names it
            session=SimpleNamespace(send_notification=self._notify),
        )

    async def _notify(self, notification: Any, related_request_id: Any = None) -> None:
        data = notification.model_dump(by_alias=True, mode="json", exclude_none=True)
        await self.sink.send(_sse_event(types.JSONRPCNotification(jsonrpc="2.0", **data)))

    async def run(self, out: MemoryObjectReceiveStream[bytes]) -> None:
        async for frame in out:
            self.frames.append(json.loads(frame.split(b"data: ", 1)[1]))
            self.got.set()
            await self.hold.wait()

    async def wait_frames(self, n: int) -> None:
        with anyio.fail_after(WAIT):
            while len(self.frames) < n:
                self.got = anyio.Event()
                await self.got.wait()

    def uris(self) -> list[str]:
        return [f["params"].get("uri", f["method"]) for f in self.frames[1:]]


async def settled(streams: ListenStreams, w: Writer) -> None:
    """Until the stream is acknowledged with nothing queued and its writer waits for a frame."""
    await until(
        lambda: all(st.acked and not st.backlog for st in streams._streams)
        and w._out.statistics().tasks_waiting_receive == 1,
        what="the stream acknowledged, nothing queued, its writer waiting",
        timeout_s=WAIT,
        every_s=0.001,
    )


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

        tg.start_soon(serve)
        await until(
            lambda: streams.open_streams != 0,
            what="registered, its ack not yet taken (no writer yet)",
            timeout_s=WAIT,
        )
        streams.publish(ResourceUpdated(uri="note://a"))  # before the ack is written: queued
        tg.start_soon(w.run, w._out)
        await w.wait_frames(2)
        assert w.frames[0]["method"] == "notifications/subscriptions/acknowledged"
        await settled(streams, w)
        streams.publish(ResourceUpdated(uri="note://b"))  # writer waiting, nothing queued: direct
        assert streams.direct_frames == 1
        await w.wait_frames(3)
        await settled(streams, w)
        w.hold = anyio.Event()  # the writer is now busy with the next frame it takes
        streams.publish(ResourceUpdated(uri="note://a"))  # handed over; the writer then stalls
        streams.publish(ResourceUpdated(uri="note://c"))  # not subscribed: nowhere
        streams.publish(ToolsListChanged())  # busy writer: queued behind
        streams.publish(ResourceUpdated(uri="note://b"))  # queued behind that, not direct
        assert streams.direct_frames == 2
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
    streams = ListenStreams(max_buffered_events=3)
    w = Writer()
    async with anyio.create_task_group() as tg:
        tg.start_soon(w.run, w._out)
        tg.start_soon(streams.serve, w.ctx, listen_params("note://a"))
        await w.wait_frames(1)  # the ack
        await settled(streams, w)
        w.hold = anyio.Event()  # the client stops reading
        for _ in range(6):
            streams.publish(ResourceUpdated(uri="note://a"))
        assert streams.open_streams == 0, "the stream past its bound was let go"
        tg.cancel_scope.cancel()


async def test_a_limit_on_open_streams_per_binding() -> None:
    streams = ListenStreams(max_subscriptions=1)
    w, other = Writer(), Writer()
    async with anyio.create_task_group() as tg:
        tg.start_soon(w.run, w._out)
        tg.start_soon(streams.serve, w.ctx, listen_params("note://a"))
        await w.wait_frames(1)
        with pytest.raises(Exception, match="Subscription limit reached"):
            await streams.serve(other.ctx, listen_params("note://a"))
        tg.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("acked", "backlog", "writer_waiting", "direct"),
    [
        (True, 0, True, True),
        (False, 0, True, False),  # the ack is not written yet: it must stay first
        (True, 1, True, False),  # something queued (or being written) is ahead
        (True, 0, False, False),  # the writer is busy: hand-off would block
    ],
)
async def test_publish_hands_over_only_when_nothing_can_be_ahead(
    acked: bool, backlog: int, writer_waiting: bool, direct: bool
) -> None:
    """The rule that keeps frames in order, state by state (module docstring)."""
    from mcp_reconciler.api.frontdoor.listen import _Stream

    sink, out = anyio.create_memory_object_stream[bytes](0)
    backlog_in, backlog_out = anyio.create_memory_object_stream[ServerEvent](8)
    streams = ListenStreams()
    stream = _Stream(
        honored=types.SubscriptionFilter(resource_subscriptions=["note://a"]),
        uris=frozenset({"note://a"}),
        meta=META,
        meta_json=meta_json(META),
        sink=sink,
        backlog_in=backlog_in,
        backlog=backlog,
        acked=acked,
    )
    streams._streams.add(stream)
    taken: list[bytes] = []
    async with anyio.create_task_group() as tg:
        if writer_waiting:

            async def take() -> None:
                taken.append(await out.receive())

            tg.start_soon(take)
            await until(
                lambda: out.statistics().tasks_waiting_receive != 0,
                what="the taker to wait for a frame",
                timeout_s=WAIT,
            )
        streams.publish(ResourceUpdated(uri="note://a"))
        assert streams.direct_frames == int(direct)
        assert backlog_out.statistics().current_buffer_used == int(not direct)
        assert stream.backlog == backlog + int(not direct)
        tg.cancel_scope.cancel()
    assert len(taken) == int(direct)
