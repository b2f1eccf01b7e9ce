"""Server-sent events as the data plane writes them: one JSON-RPC message per ``message`` event,
comment pings to keep idle streams open behind proxies, and the response head of a stream.

Guarantee: a frame is complete (``\\r\\n\\r\\n``-terminated) and carries one message; an
``event_id`` (2025-11-25 resumable streams) precedes the data line so a client's
``Last-Event-ID`` names exactly the frames it has seen."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Final

from mcp_reconciler.api.plane.jsonrpc import encode, encode_sliced

#: Seconds between keepalive comments once a stream has committed (the SDK's own interval).
PING_INTERVAL_S: Final = 15.0

PING: Final = b": ping\r\n\r\n"

#: An event of up to this many bytes goes out as one ``send`` (:func:`coalesced`).
JOIN_MAX: Final = 256 * 1024
#: In a bigger event, pieces under this size are joined with their small neighbours.
SMALL_PIECE: Final = 4096

HEADERS: Final[list[tuple[bytes, bytes]]] = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]


def frame(message: Mapping[str, Any], event_id: str | None = None) -> bytes:
    """One ``event: message`` frame carrying ``message``."""
    head = f"id: {event_id}\r\n" if event_id is not None else ""
    return f"{head}event: message\r\ndata: ".encode() + encode(message) + b"\r\n\r\n"


@functools.lru_cache(maxsize=64)  # the gateway's own method names: a handful, bounded anyway
def bare_notification(method: str) -> bytes:
    """The frame of a notification without params (``notifications/tools/list_changed``): made
    once, the same bytes for every stream it is written to."""
    return frame({"jsonrpc": "2.0", "method": method})


async def frame_sliced(message: Mapping[str, Any], event_id: str | None = None) -> list[bytes]:
    """:func:`frame` as pieces (``jsonrpc.encode_sliced``): how a response carrying a result is
    framed, whatever its size."""
    head = f"id: {event_id}\r\n" if event_id is not None else ""
    return [f"{head}event: message\r\ndata: ".encode(), *await encode_sliced(message), b"\r\n\r\n"]


def coalesced(pieces: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """``pieces`` (one event's) as fewer, bigger pieces, the same bytes in order: up to
    :data:`JOIN_MAX` in all, one piece (one socket write, not one per piece: a list response is
    six pieces); in a bigger event only neighbouring small pieces are joined — a big piece goes
    as it is, never copied (ADR 0040)."""
    if len(pieces) < 2:
        return pieces
    if sum(map(len, pieces)) <= JOIN_MAX:
        return (b"".join(pieces),)
    out: list[bytes] = []
    run: list[bytes] = []
    for piece in pieces:
        if len(piece) < SMALL_PIECE:
            run.append(piece)
            continue
        if run:
            out.append(b"".join(run))
            run = []
        out.append(piece)
    if run:
        out.append(b"".join(run))
    return tuple(out)
