"""A bounded, per-session event store for streamable HTTP resumability.

The SDK hands one ``event_store`` to every session, and stream ids are only unique within a
session, so a shared store can replay one session's notification to another. Each session gets
its own :class:`BoundedEventStore`. Test support for the SDK servers the tests run upstream (the
gateway keeps its own, api/plane/sessions.py), bounded so a client that never reconnects costs a
fixed amount of memory."""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId

MAX_EVENTS_PER_SESSION = 256


class BoundedEventStore(EventStore):
    """One session's last ``max_events`` events, oldest evicted first. Replay after an evicted or
    unknown event id replays nothing (the client re-lists: ``list_changed`` carries no payload)."""

    def __init__(self, max_events: int = MAX_EVENTS_PER_SESSION) -> None:
        self._events: deque[tuple[EventId, StreamId, Any]] = deque(maxlen=max_events)
        self._ids = itertools.count(1)

    async def store_event(self, stream_id: StreamId, message: Any) -> EventId:
        """Record ``message`` on ``stream_id``; the id is unique within this store."""
        event_id = f"{stream_id}:{next(self._ids)}"
        self._events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        """Send every retained event of ``last_event_id``'s stream that came after it, in order."""
        events = list(self._events)
        index = next((i for i, (eid, _, _) in enumerate(events) if eid == last_event_id), None)
        if index is None:
            return None  # evicted or unknown: the client re-lists (list_changed carries no payload)
        stream_id = events[index][1]
        for event_id, sid, message in events[index + 1 :]:
            if sid == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id
