"""One binding's ``subscriptions/listen`` streams (2026-07-28; ADR 0017), with events handed to
each stream's writer directly (issue 11's fan-out target).

This is the SDK's ``InMemorySubscriptionBus`` + ``ListenHandler`` pair with the same contract —
the acknowledgement is a stream's first frame; every frame carries the listen request's id under
``_meta["io.modelcontextprotocol/subscriptionId"]``; a stream gets only the kinds (and resource
URIs) it asked for; a stream whose client stops reading is ended once
:data:`MAX_BUFFERED_EVENTS` are waiting; :meth:`ListenStreams.close` ends every stream
gracefully, each with its ``SubscriptionsListenResult`` as the last frame — and one difference
in how a frame travels.

On streamable HTTP the data plane hands a listen request a stream it writes onto the response
itself (``link.listen_writer``: the plane's ``push.DirectStream``). Here :meth:`ListenStreams.publish`
writes each stream's frame *directly*, in the publisher's own pass, when nothing can be ahead of
it — the stream is acknowledged, its backlog is empty and no write is in flight — so one
``list_changed`` for 1,000 streams is 1,000 socket writes in one synchronous pass: no task wake,
no queue, no pump per stream, and the notification is built and serialized once per event, not
per stream (issue 26's fan-out, ADR 0038 "Addendum: fan-out"). A write the transport holds (a
client that stopped reading) finishes in a task of its own and never stalls the pass; the
stream counts as busy meanwhile. Otherwise (the ack not yet written, a backlog, a write in
flight) the event joins the stream's backlog, which the stream's own task drains in order; a
frame never overtakes another. On a transport without a writer (stdio) every event takes the
backlog, as with the SDK.

Races: none beyond the SDK's. One event loop; :meth:`publish` does not await, and a stream's
backlog count covers an event from the moment it is queued until its write has completed."""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY, ServerEvent, event_matches, event_to_notification
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)

from mcp_reconciler.api.frontdoor import link

log = logging.getLogger("mcp_reconciler.frontdoor")

#: Open listen streams per binding (the SDK handler's default).
MAX_SUBSCRIPTIONS = 1024
#: Events waiting for one stream before it is ended (the SDK handler's default).
MAX_BUFFERED_EVENTS = 1024


def honored_subset(requested: SubscriptionFilter) -> SubscriptionFilter:
    """What the acknowledgement promises: every requested kind (falsy flags and an empty URI
    list dropped), as the SDK's handler acknowledges."""
    return SubscriptionFilter(
        tools_list_changed=True if requested.tools_list_changed else None,
        prompts_list_changed=True if requested.prompts_list_changed else None,
        resources_list_changed=True if requested.resources_list_changed else None,
        resource_subscriptions=list(requested.resource_subscriptions) if requested.resource_subscriptions else None,
    )


_HEAD, _TAIL = b"event: message\r\ndata: ", b"\r\n\r\n"  # the SDK writer's SSE framing


class _Frames:
    """One event's wire frame around a stream's own ``_meta``: the notification is dumped once
    (as the SDK's session dumps it) and rendered once with a placeholder where ``_meta`` goes —
    the key keeps its place, so the bytes are the ones the SDK writes — leaving the text before
    and after it; a stream's frame is that text around its own ``_meta`` JSON."""

    _HOLE = "\x00meta\x00"

    def __init__(self, event: ServerEvent) -> None:
        data = event_to_notification(event, {}).model_dump(by_alias=True, mode="json", exclude_none=True)
        self._message = {"jsonrpc": "2.0", "method": data["method"], "params": data.get("params") or {}}
        parts = self._render(self._HOLE).split(json.dumps(self._HOLE))
        # A URI that holds the placeholder itself (never a real one) is rendered per stream.
        self._around = (_HEAD + parts[0].encode(), parts[1].encode() + _TAIL) if len(parts) == 2 else None

    def _render(self, meta: Any) -> str:
        params = {**self._message["params"], "_meta": meta}
        return json.dumps({**self._message, "params": params}, separators=(",", ":"))

    def frame(self, meta: dict[str, Any], meta_json: bytes) -> bytes:
        """The frame for a stream whose ``_meta`` is ``meta``, rendered as ``meta_json``."""
        if self._around is not None:
            return self._around[0] + meta_json + self._around[1]
        return _HEAD + self._render(meta).encode() + _TAIL


def meta_json(meta: dict[str, Any]) -> bytes:
    """A stream's ``_meta`` as the SDK's serializer writes it."""
    return json.dumps(meta, separators=(",", ":")).encode()


@functools.lru_cache(maxsize=256)
def frames_for(event: ServerEvent) -> _Frames:
    """The frames of ``event`` (events are frozen values: one update told to every binding
    builds its notification once)."""
    return _Frames(event)


@dataclass(eq=False)
class _Stream:
    honored: SubscriptionFilter
    uris: frozenset[str]
    meta: dict[str, Any]
    meta_json: bytes
    writer: link.FrameWriter | None
    backlog_in: MemoryObjectSendStream[ServerEvent]
    backlog: int = 0  # queued, or being written by the stream's task
    acked: bool = False

    def end(self) -> None:
        self.backlog_in.close()  # the stream's task drains what is queued, then answers


class ListenStreams:
    """The open listen streams of one binding; :meth:`serve` is the ``subscriptions/listen``
    handler, :meth:`publish` the bus (see the module docstring)."""

    def __init__(
        self, *, max_subscriptions: int = MAX_SUBSCRIPTIONS, max_buffered_events: int = MAX_BUFFERED_EVENTS
    ) -> None:
        self._max_subscriptions = max_subscriptions
        self._max_buffered_events = max_buffered_events
        self._streams: set[_Stream] = set()
        #: Frames :meth:`publish` handed to a writer directly so far (the rest took a backlog).
        self.direct_frames = 0

    @property
    def open_streams(self) -> int:
        """Listen streams open now."""
        return len(self._streams)

    def publish(self, event: ServerEvent) -> None:
        """Deliver ``event`` to every open stream whose filter admits it. Never blocks."""
        for stream in list(self._streams):
            if not event_matches(stream.honored, stream.uris, event):
                continue
            writer = stream.writer
            if writer is not None and stream.acked and not stream.backlog and writer.takes_direct():
                writer.direct(frames_for(event).frame(stream.meta, stream.meta_json))
                self.direct_frames += 1
                continue
            try:
                stream.backlog_in.send_nowait(event)
                stream.backlog += 1
            except anyio.WouldBlock:
                log.warning("listen stream %r backlog full; ending the stream", stream.meta)
                self._streams.discard(stream)
                stream.end()
            except anyio.ClosedResourceError:
                pass  # closing: its task is draining

    async def serve(
        self, ctx: ServerRequestContext[Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        """Serve one listen stream until the client goes (the request is cancelled) or
        :meth:`close`; answers the ``SubscriptionsListenResult`` that ends it."""
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        if len(self._streams) >= self._max_subscriptions:
            raise MCPError(INTERNAL_ERROR, "Subscription limit reached")
        honored = honored_subset(params.notifications)
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        backlog_in, backlog_out = anyio.create_memory_object_stream[ServerEvent](self._max_buffered_events)
        stream = _Stream(
            honored=honored,
            uris=frozenset(honored.resource_subscriptions or ()),
            meta=meta,
            meta_json=meta_json(meta),
            writer=link.listen_writer(ctx),
            backlog_in=backlog_in,
        )
        # Registered before the ack is written, so an event published meanwhile is queued (the
        # ack is still first: only this task writes until ``acked``).
        self._streams.add(stream)
        try:
            ack = SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=meta)
            await ctx.session.send_notification(
                SubscriptionsAcknowledgedNotification(params=ack), related_request_id=subscription_id
            )
            stream.acked = True
            async for event in backlog_out:
                try:
                    if stream.writer is not None:
                        await stream.writer.write(frames_for(event).frame(stream.meta, stream.meta_json))
                    else:
                        notification = event_to_notification(event, meta)
                        await ctx.session.send_notification(notification, related_request_id=subscription_id)
                finally:
                    stream.backlog -= 1
        finally:
            self._streams.discard(stream)
            backlog_in.close()
            backlog_out.close()
        return SubscriptionsListenResult(_meta=meta)

    def close(self) -> None:
        """End every open stream gracefully: each drains its backlog and answers its result."""
        for stream in list(self._streams):
            self._streams.discard(stream)
            stream.end()
