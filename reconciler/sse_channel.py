"""The legacy-SSE channel (ADR 0043): the SDK's ``sse_client`` (the one transport the gateway
does not own, ADR 0037) over an ``httpx2`` client whose transport holds every byte the upstream
sends to its bound *while it is read*, before the SDK's event parser sees it.

Guarantees (those of :mod:`reconciler.peer_contract`, for this wire):

1. **Bounded while reading.** The event stream is split into SSE events (lines up to a blank
   line; ``\\n``, ``\\r\\n`` or ``\\r`` ends a line) by :class:`EventSplitter`; an event's raw
   bytes, everything from its first byte to the end of its blank line, are counted as they
   arrive. An event is passed on whole once its blank line arrives, so memory per channel is
   one event at most. One larger than its bound is refused *there*: its bytes past the bound are
   skipped, never kept or parsed. The bound is ``limits.upstream_message_bytes``, an answer to
   a list request's the listing's ``bytes_per_candidate`` if tighter, and never more than
   :data:`SSE_EVENT_BYTES`: the SDK's own SSE client holds each event to 1 MiB and ends the whole
   connection past it (``httpx2.SSEError``), so above that the channel refuses cleanly first and
   names :data:`SSE_EVENT_BOUND`, a bound no config raises.
2. **The refused call gets an answer.** The refused event's first bytes (its JSON-RPC envelope,
   :func:`~reconciler.stdio_peer.envelope`) tell which request it answered; the SDK's parser
   gets a small ``message`` event in its place, the JSON-RPC error :func:`bound_error` makes,
   so the call fails at once with :class:`~reconciler.peer_contract.MessageBoundError`. A
   refused server→client request is answered upstream with the same error; a refused
   notification is dropped. The operator log names the source and the size.
3. **Recovered or recycled.** The stream reads on from the refused event's blank line; an event
   that names no request ends the channel (the SDK's reader gets a ``MessageBoundError`` from
   the stream, the session ends and the connection is replaced).
4. **List pages counted before the SDK parses them.** While a list request is in flight, an
   event answering it is parsed here in slices (:func:`~reconciler.sliced_json.parse_sliced`)
   with the listing's ``entries_per_generation``: past it the page becomes the bound's error
   within a slice of entry ``entries + 1``, and the SDK never parses or validates it. A page
   within the bound is parsed twice (here, then by the SDK): list pages only, the cost of
   keeping the SDK's client.
5. **Every other response bounded too.** A response that is not an event stream (the POSTs'
   ``202 Accepted``) is held to the message bound in total. Compressed responses are refused
   (``Accept-Encoding: identity`` is sent): bytes are counted as they come off the wire, and a
   compressed body's decoded size would not be.

For a well-behaved server the SDK's parser sees the same bytes as without this channel, in the
same order (each event once it is complete, as the SDK's parser would yield it)."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterable, AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pydantic_core
from mcp.client.sse import sse_client
from mcp.shared.message import SessionMessage

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.peer_contract import (
    LIST_FIELDS,
    MESSAGE_BOUND_KEY,
    SSE_EVENT_BOUND,
    MessageBoundError,
    bound_error,
)
from mcp_reconciler.reconciler.sliced_json import SLICED_BYTES, EntriesPassed, parse_sliced
from mcp_reconciler.reconciler.stdio_peer import (
    PREFIX_BYTES,
    LimitFor,
    LineSplitter,
    ListWatch,
    Refused,
    Skipped,
    envelope,
)

log = logging.getLogger("mcp_reconciler.upstream.sse")

#: The largest event the SDK's SSE client accepts (``sse_client`` reads with ``httpx2``'s
#: ``EventSource(max_event_size=1 MiB)``; past it the SDK ends the connection). Events are held
#: to ``min(this, the configured bound)``, so the SDK's own limit is never what refuses one.
#: ``tests/integration/test_sse_bounds.py`` checks the SDK still refuses just above it.
SSE_EVENT_BYTES = 1024 * 1024

_EOL = re.compile(rb"\r\n?|\n")
_LF = 0x0A
_LIST_FIELDS = frozenset(LIST_FIELDS)


class EventSplitter(LineSplitter):
    """Splits an SSE byte stream into events, keeping at most one event's bytes (up to its
    bound): :meth:`feed` returns each complete event's raw bytes (its blank line included),
    :class:`~reconciler.stdio_peer.Refused` when one passes its bound and
    :class:`~reconciler.stdio_peer.Skipped` at its end. Linear, as the line splitter it extends:
    each byte is scanned once for a line end and copied at most twice."""

    def __init__(self, limit: int, *, limit_for: LimitFor | None = None, soft: int | None = None) -> None:
        super().__init__(limit, limit_for=limit_for, soft=soft)
        self._line = 0  # bytes of the current line before its end
        self._after_cr = False  # the last chunk ended in CR: a LF first in the next one ends the same line

    def feed(self, chunk: bytes) -> list[bytes | Refused | Skipped]:
        """What ``chunk`` completes: whole events, refusals and skips, in order."""
        out: list[bytes | Refused | Skipped] = []
        pos = 0
        end = len(chunk)
        while pos < end:
            if self._after_cr:
                self._after_cr = False
                if chunk[pos] == _LF:
                    if self._size == 0:  # the CR ended an event: its LF goes on at once, alone
                        out.append(b"\n")
                    else:
                        self._take(chunk, pos, pos + 1, out)
                    pos += 1
                    continue
            eol = _EOL.search(chunk, pos)
            if eol is None:
                self._take(chunk, pos, end, out)
                self._line += end - pos
                break
            self._take(chunk, pos, eol.end(), out)
            blank = self._line + eol.start() - pos == 0
            self._line = 0
            self._after_cr = eol.end() == end and chunk[eol.end() - 1] != _LF
            pos = eol.end()
            if blank:
                out.append(self.finish())
        return out

    def finish(self) -> bytes | Skipped:
        """The current event's bytes (or the end of a refused one), starting the next event."""
        item: bytes | Skipped = Skipped(self._size) if self._skipping else b"".join(self._pieces)
        self._reset()
        return item


def data_of(event: bytes) -> bytes:
    """An event's data: its ``data:`` fields' values joined by LF (the SSE rule)."""
    values = []
    for line in _EOL.split(event):
        if line.startswith(b"data:"):
            value = line[5:]
            values.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(values)


def message_event(message: types.JSONRPCError) -> bytes:
    """A ``message`` event carrying ``message`` (what the SDK's parser gets for a refused event)."""
    return (
        b"event: message\r\ndata: " + message.model_dump_json(by_alias=True, exclude_none=True).encode() + b"\r\n\r\n"
    )


class SseBounds:
    """One channel's bounds and list watch: :meth:`events` filters its event stream,
    :attr:`lists` sees every message it sends (list requests), :attr:`answer` (set once the
    channel is open) sends a message upstream."""

    def __init__(self, source: str, *, message_bytes: int, list_bytes: int | None, list_entries: int | None) -> None:
        self.source = source
        self.message_bytes = message_bytes
        self.event_bytes = min(message_bytes, SSE_EVENT_BYTES)
        self.lists = ListWatch(source, list_bytes, list_entries)
        self.answer: Callable[[SessionMessage], Any] | None = None

    def _bound(self) -> str:
        return MESSAGE_BOUND_KEY if self.message_bytes <= SSE_EVENT_BYTES else SSE_EVENT_BOUND

    def splitter(self) -> EventSplitter:
        """A splitter for one event stream: the list bound for list answers, the event bound else."""
        lists, bound, limit = self.lists, self._bound(), self.event_bytes

        def decide(prefix: bytes) -> tuple[str, int]:
            key, value = lists.limit_for(limit)(prefix)
            if key != MESSAGE_BOUND_KEY and lists.limit is not None and lists.limit <= limit:
                return key, value  # a list page's own, tighter bound
            return bound, limit

        soft = min(limit, lists.limit) if lists.limit is not None else limit
        return EventSplitter(limit, limit_for=decide, soft=soft)

    async def events(self, stream: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
        """``stream``'s bytes, event by event, each held to its bound (module docstring)."""
        splitter = self.splitter()
        async for chunk in stream:
            for item in splitter.feed(chunk):
                if isinstance(item, bytes):
                    yield await self._checked(item)
                elif isinstance(item, Refused):
                    replacement = await self._refused(item)
                    if replacement:
                        yield replacement
                else:
                    log.info("upstream %s: skipped a refused SSE event of %d bytes", self.source, item.size)
        if splitter.pending:  # the stream ended mid-event: the SDK's parser decides what it was
            rest = splitter.finish()
            if isinstance(rest, bytes):
                yield rest

    async def _checked(self, event: bytes) -> bytes:
        """``event``, or the entry bound's error in its place for a list page past it."""
        lists = self.lists
        if not lists.ids:  # no list request in flight: nothing to look at (the common case)
            return event
        request_id = lists.list_request(_after_fields(event))
        if request_id is None:
            return event
        try:
            if lists.entries is None:
                return event
            payload = data_of(event)
            try:
                if len(payload) > SLICED_BYTES:  # in slices, stopping at entry ``entries + 1``
                    data = await parse_sliced(payload, list_fields=_LIST_FIELDS, entries=lists.entries)
                else:
                    data = pydantic_core.from_json(payload)
            except EntriesPassed as passed:
                return message_event(lists.refused(request_id, passed.count))
            except ValueError:
                return event  # malformed: the SDK's parser reports it as it would have
            refused = lists.refuse(data)  # counted whole (a short page, or one the slices did not stop)
            return event if refused is None else message_event(refused)
        finally:
            lists.ids.discard(request_id)

    async def _refused(self, refused: Refused) -> bytes:
        """What the SDK's parser gets for a refused event (module docstring, guarantees 2, 3)."""
        env = envelope(_after_fields(refused.prefix))
        attributable = env.id is not None or env.has_method
        log.warning(
            "upstream %s: SSE event over %s (%d bytes) refused after %d bytes%s",
            self.source,
            refused.bound,
            refused.limit,
            refused.size,
            "" if attributable else "; it names no request, so the connection is recycled",
        )
        telemetry.upstream_messages_refused.add(1, {"source": self.source, "bound": refused.bound})
        if not attributable:
            raise MessageBoundError(refused.bound, refused.limit, refused.size)
        if env.id is None:
            return b""  # a notification: dropped
        error = types.JSONRPCError(
            jsonrpc="2.0", id=env.id, error=bound_error(refused.bound, refused.limit, refused.size)
        )
        if env.has_method:  # a server→client request: tell the server, not the session
            if self.answer is not None:
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                    await self.answer(SessionMessage(error))
            return b""
        self.lists.ids.discard(env.id)
        return message_event(error)


def _after_fields(event: bytes) -> bytes:
    """An event's bytes from its first ``{`` (its JSON's envelope), or all of it."""
    start = event.find(b"{", 0, PREFIX_BYTES)
    return event[start : start + PREFIX_BYTES] if start >= 0 else event[:PREFIX_BYTES]


class _EventStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, bounds: SseBounds) -> None:
        self.inner = inner
        self.bounds = bounds

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.bounds.events(self.inner):
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CappedStream(httpx2.AsyncByteStream):
    """A response body that is not an event stream, held to ``limit`` bytes in total."""

    def __init__(self, inner: httpx2.AsyncByteStream, bounds: SseBounds) -> None:
        self.inner = inner
        self.bounds = bounds

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        limit = self.bounds.message_bytes
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > limit:
                log.warning(
                    "upstream %s: HTTP response over %s (%d bytes) refused",
                    self.bounds.source,
                    MESSAGE_BOUND_KEY,
                    limit,
                )
                telemetry.upstream_messages_refused.add(1, {"source": self.bounds.source, "bound": MESSAGE_BOUND_KEY})
                raise MessageBoundError(MESSAGE_BOUND_KEY, limit, seen)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class BoundedTransport(httpx2.AsyncBaseTransport):
    """``inner`` (the default: ``httpx2.AsyncHTTPTransport``) with every response body bounded
    (:class:`SseBounds`): event streams event by event, anything else in total."""

    def __init__(self, bounds: SseBounds, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.bounds = bounds
        self.inner = inner or httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        if encoding != "identity":
            await stream.aclose()
            raise httpx2.DecodingError(f"the upstream sent a {encoding!r}-encoded response; identity was asked for")
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        wrapped = (
            _EventStream(stream, self.bounds) if kind == "text/event-stream" else _CappedStream(stream, self.bounds)
        )
        return httpx2.Response(
            status_code=response.status_code, headers=response.headers, stream=wrapped, extensions=response.extensions
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def client_factory(
    bounds: SseBounds, inner: httpx2.AsyncBaseTransport | None = None
) -> Callable[..., httpx2.AsyncClient]:
    """What ``sse_client`` takes as ``httpx_client_factory``: the SDK's client configuration
    (its timeouts, headers, auth; redirects off) over a :class:`BoundedTransport`."""

    def factory(
        headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None, auth: httpx2.Auth | None = None
    ) -> httpx2.AsyncClient:
        sent = {**(headers or {}), "Accept-Encoding": "identity"}
        return httpx2.AsyncClient(headers=sent, timeout=timeout, auth=auth, transport=BoundedTransport(bounds, inner))

    return factory


class _WatchedWrite:
    """The channel's write end: every message the session sends is seen by the bounds' list watch."""

    def __init__(self, write: Any, bounds: SseBounds) -> None:
        self.write = write
        self.bounds = bounds

    async def send(self, item: SessionMessage) -> None:
        """Note a list request's id, then send ``item`` on."""
        self.bounds.lists.watch(item.message)
        await self.write.send(item)

    async def aclose(self) -> None:
        """Close the SDK's write end."""
        await self.write.aclose()

    async def __aenter__(self) -> _WatchedWrite:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@contextlib.asynccontextmanager
async def sse_channel(
    source: str,
    url: str,
    *,
    headers: dict[str, str],
    connect_s: float,
    read_s: float,
    auth: httpx2.Auth | None,
    message_bytes: int,
    list_bytes: int | None = None,
    list_entries: int | None = None,
    inner: httpx2.AsyncBaseTransport | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) streams of a legacy-SSE connection to ``url``, bounded as the module
    docstring says. ``inner`` is the HTTP transport under the bounds (default: httpx2's own)."""
    bounds = SseBounds(source, message_bytes=message_bytes, list_bytes=list_bytes, list_entries=list_entries)
    channel: AbstractAsyncContextManager[tuple[Any, Any]] = sse_client(
        url,
        headers=headers,
        timeout=connect_s,
        sse_read_timeout=read_s,
        auth=auth,
        httpx_client_factory=client_factory(bounds, inner),
    )
    async with channel as (read, write):
        bounds.answer = write.send
        yield read, _WatchedWrite(write, bounds)


__all__ = ["SSE_EVENT_BOUND", "SSE_EVENT_BYTES", "EventSplitter", "SseBounds", "client_factory", "sse_channel"]
