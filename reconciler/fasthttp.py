"""A pooled keep-alive HTTP/1.1 client for one kind of exchange: POST one JSON-RPC request to a
streamable-HTTP MCP endpoint and read its one response (issue 12, ADR 0019).

The SDK's streamable-HTTP client is general: per request it builds an ``httpx2`` request, spawns
a task group and a task, parses the response as an event source, validates every message into
models and routes it through memory streams. For a 2026-07-28 upstream, a ``tools/call`` with no
progress token and no log opt-in has exactly one thing on its response stream: the response.
:class:`JsonRpcPoster` does just that exchange: one buffer written (headers and body), the
response parsed by ``httptools`` (C, already a dependency) and the body read to its end, the
JSON-RPC response picked out of a JSON body or an SSE stream. Connections are kept alive and
reused (at most ``max_idle`` idle ones are kept).

Failure semantics:

- idle connections are reused for at most :data:`KEEPALIVE_EXPIRY_S`, and only when the socket
  shows nothing to read (an idle connection that is readable was closed by the server, or holds
  bytes nobody asked for: it is dropped); a reused one whose request cannot even be written is
  retried once on a fresh connection (the server had closed it, so it never saw the request). A
  request that was written is never sent again: if the connection ends before the first response
  byte the upstream may have run it, so the caller gets the error (tools are not idempotent);
  anything else that breaks the exchange raises :class:`~reconciler.errors.UpstreamUnavailableError`
  and the connection is dropped, never pooled;
- cancellation (the caller's scope, a timeout) closes the connection: the upstream sees its
  request stream end, which is the 2026 wire's cancellation (the SDK does the same);
- a non-2xx status answers the JSON-RPC error in its body if there is one, else the same stand-in
  errors the SDK's transport uses;
- other messages on an SSE response stream (log records the request opted into; a 2025-era
  server's own requests, which ``reconciler/legacy_lane.py`` answers) are handed to the
  caller's ``on_message`` as each event completes, in order, before the result; without one
  they are skipped;
- ``post(resume=True)`` (the 2025 era) follows a stream the server ended before the response
  with ``GET`` + ``Last-Event-ID``, as the SDK's transport does (:meth:`JsonRpcPoster._resume`).

No task is started: every exchange runs in its caller's task, so its owner is whoever awaits it."""

from __future__ import annotations

import json
import logging
import select
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import anyio
import anyio.lowlevel
import httptools
from anyio.abc import ByteStream, SocketAttribute

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.errors import UpstreamUnavailableError
from mcp_reconciler.reconciler.peer_contract import (
    DEFAULT_UPSTREAM_MESSAGE_BYTES,
    MESSAGE_BOUND_KEY,
    MessageBoundError,
)
from mcp_reconciler.reconciler.sliced_json import SLICED_BYTES, parse_message

log = logging.getLogger("mcp_reconciler.upstream")

#: The largest message accepted by default: a JSON body, or one SSE event of a stream
#: (``limits.upstream_message_bytes``, ADR 0025; the poster's ``max_message_bytes``).
MAX_BODY_BYTES = DEFAULT_UPSTREAM_MESSAGE_BYTES
#: An idle connection older than this is closed instead of reused: servers close idle
#: keep-alive connections after a few seconds (uvicorn: 5 s), and a request racing that close is
#: lost. Below uvicorn's default, like httpx's own 5 s expiry.
KEEPALIVE_EXPIRY_S = 4.0
#: Same-origin redirects followed per request (the first one is remembered for the next ones).
MAX_REDIRECTS = 2
#: Resuming a request stream (2025 era): the delay when the server names none (the SDK's
#: default), and how many failed attempts in a row end the exchange (the SDK's bound).
RESUME_DELAY_MS = 1000
MAX_RESUME_FAILURES = 2


#: Receives each message on a response stream that is not the response (in order, awaited).
OnMessage = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class StreamEnd:
    """How a ``GET`` stream ended (:meth:`JsonRpcPoster.stream`)."""

    status: int
    last_event_id: str | None
    retry_ms: int | None


class ResponseError(Exception):
    """The upstream answered with a JSON-RPC error (``error`` is its error object) or with an HTTP
    status the SDK also maps to an error (``error`` is the SDK's stand-in)."""

    def __init__(self, error: Mapping[str, Any]) -> None:
        super().__init__(str(error.get("message", "")))
        self.error = dict(error)


@dataclass
class _Response:
    request_id: Any = None
    status: int = 0
    headers: dict[bytes, bytes] = field(default_factory=dict)
    body: list[bytes] = field(default_factory=list)
    size: int = 0
    complete: bool = False
    header_name: bytes = b""
    max_bytes: int = MAX_BODY_BYTES
    refused: int = 0  # bytes seen when a message passed ``max_bytes`` (0: none did)
    scanned: int = 0  # bytes of the pending SSE text already searched for an event's end

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_body(self, chunk: bytes) -> None:
        # Counted as it arrives (ADR 0025): a JSON body, or the pending (unfinished) SSE event,
        # past the bound stops the exchange here; nothing past it is kept or parsed.
        self.size += len(chunk)
        if self.size > self.max_bytes:
            self.refused = self.size
            raise _MessageTooLarge()
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        self.complete = True
        # Read here: httptools answers False once the callback has returned.
        self.keep_alive = self.parser is not None and self.parser.should_keep_alive()

    parser: Any = None
    keep_alive: bool = False

    # SSE, parsed as it arrives
    sse_offset: int = 0
    answer: dict[str, Any] | None = None
    sse: bool | None = None
    last_event_id: str | None = None  # the stream's resumption point (2025 era: Last-Event-ID)
    retry_ms: int | None = None  # the server's reconnection delay

    def is_sse(self, parser: Any) -> bool:
        if self.sse is None and self.headers:
            ok = 200 <= parser.get_status_code() < 300
            self.sse = ok and self.headers.get(b"content-type", b"").lower().startswith(b"text/event-stream")
        return bool(self.sse)

    async def take_messages(self) -> list[dict[str, Any]]:
        """The messages of the events completed since the last call, except this request's own
        response, which is kept in :attr:`answer`. Linear: only bytes not yet searched are
        searched for an event's end, the pending text is joined only when an event completed,
        and completed events are dropped (``size`` then counts the pending event only). An
        event's JSON is parsed in slices when long (``sliced_json.parse_message``, ADR 0040)."""
        if not self.body:
            return []
        if len(self.body) > 1:
            tail = self.body[-1]
            if b"\n\n" not in tail and b"\r\n\r\n" not in tail and len(tail) >= 4:
                # No event ended inside the new chunk; one may end across the boundary (<= 3 bytes back).
                edge = b"".join(self.body[-4:-1])[-3:] + tail[:3]
                if b"\n\n" not in edge and b"\r\n\r\n" not in edge:
                    self.scanned = max(0, self.size - 3)  # searched up to here, chunk by chunk
                    return []
        body = b"".join(self.body)
        await anyio.lowlevel.checkpoint()  # a long pending event: its join is one stretch, its parse others
        out: list[dict[str, Any]] = []
        while True:
            # The pending text before ``scanned`` holds no event's end (searched last time).
            end, sep = _event_end(body, max(self.sse_offset, self.scanned))
            if end < 0:
                break
            start, self.sse_offset = self.sse_offset, end + sep
            for message in await self._events(body, start, end):
                if _is_response(message, self.request_id):
                    self.answer = message
                else:
                    out.append(message)
        rest = body[self.sse_offset :]
        self.body, self.sse_offset, self.size = [rest], 0, len(rest)
        self.scanned = max(0, len(rest) - 3)  # a separator may start in its last 3 bytes
        return out

    async def _events(self, raw: bytes, start: int = 0, end: int | None = None) -> list[Any]:
        """The messages of complete SSE events ``raw[start:end]``, noting their ids and retry delays."""
        out = []
        for message, event_id, retry in await _sse_events(raw, start, end):
            if event_id is not None:
                self.last_event_id = event_id
            if retry is not None:
                self.retry_ms = retry
            if message is not None:
                out.append(message)
        return out

    async def unanswered(self) -> bool:
        """Whether this was an SSE stream that ended without this request's response (checked
        after the exchange; an event the stream's end completed is parsed here)."""
        if not self.sse or self.answer is not None:
            return False
        body = b"".join(self.body)
        start, self.sse_offset = self.sse_offset, len(body)
        for message in await self._events(body, start):
            if _is_response(message, self.request_id):
                self.answer = message
        return self.answer is None


class BearerSource(Protocol):
    """Where a poster gets its ``Authorization: Bearer`` token (an upstream OAuth source,
    ``reconciler/upstream_auth.py``): ``token()`` a current one, ``renew(rejected)`` another one
    after the upstream refused ``rejected`` with ``401``."""

    async def token(self) -> str:
        """A token that is not about to expire."""
        ...

    async def renew(self, rejected: str) -> str:
        """A token other than ``rejected``, if the endpoint gives one."""
        ...


class JsonRpcPoster:
    """POSTs JSON-RPC requests to ``url`` (``http://`` or ``https://``) over pooled keep-alive
    connections. ``headers`` go on every request (the source's configured headers); ``auth``
    adds a bearer token to every request and renews it once on a ``401`` (the request was
    refused, never run, so sending it again is safe); ``on_status`` sees each request's HTTP
    status (the operator's evidence of a failure, ``reconciler/failure_cause.py``). Close with
    :meth:`aclose`; an exchange in flight then fails like a broken connection."""

    def __init__(self, url: str, headers: Mapping[str, str] | None = None, *, max_idle: int = 64,
                 connect_timeout_s: float = 10.0, max_message_bytes: int = MAX_BODY_BYTES,
                 source: str = "?", auth: BearerSource | None = None,
                 ssl_context: ssl.SSLContext | None = None,
                 on_status: Callable[[int], None] | None = None) -> None:  # fmt: skip
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"JsonRpcPoster needs an http:// or https:// URL, not {url!r}")
        self._tls = parts.scheme == "https"
        self._ssl_context = ssl_context
        self._auth = auth
        self._on_status = on_status  # sees every exchange's HTTP status (a failure's evidence)
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        path = parts.path or "/"
        self._target = (path + (f"?{parts.query}" if parts.query else "")).encode()
        host_header = parts.netloc.rsplit("@", 1)[-1]
        fixed = {"host": host_header, "accept": "application/json, text/event-stream",
                 "content-type": "application/json", "user-agent": "mcp-reconciler"}  # fmt: skip
        fixed.update({k.lower(): v for k, v in (headers or {}).items()})
        self._fixed = fixed
        # (connection, its socket, idle since): the socket is looked up once per connection, not
        # per checkout (anyio builds a stream's extra attributes anew on every lookup).
        self._idle: list[tuple[ByteStream, socket.socket, float]] = []
        self._max_idle = max_idle
        self._connect_timeout_s = connect_timeout_s
        self._max_message_bytes = max_message_bytes
        self._source = source
        self._closed = False
        self.exchanges = 0  # requests answered (for status and tests)

    @property
    def max_message_bytes(self) -> int:
        """The bound every message is held to (``limits.upstream_message_bytes``)."""
        return self._max_message_bytes

    async def aclose(self) -> None:
        """Close every idle connection; later exchanges fail."""
        self._closed = True
        idle, self._idle = self._idle, []
        for stream, _, _ in idle:
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    async def post(
        self,
        message: Mapping[str, Any],
        headers: Mapping[str, str],
        on_message: OnMessage | None = None,
        *,
        resume: bool = False,
        bound: tuple[str, int] | None = None,
        on_headers: Callable[[Mapping[bytes, bytes]], None] | None = None,
    ) -> dict[str, Any]:
        """Send ``message`` (a JSON-RPC request with an ``id``) with ``headers`` added and return
        its response's ``result``. Every other message on an SSE response stream (a log record
        the request opted into, a 2025-era server's own request) is awaited through
        ``on_message`` as it arrives, in order, before this returns (skipped without one).
        ``resume``: an SSE stream that ends before the response, after an event with an id, is
        resumed as the 2025-11-25 era does it (:meth:`_resume`). Raises :class:`ResponseError`
        for a JSON-RPC error, :class:`UpstreamUnavailableError` when the exchange breaks.
        ``bound``: (config key, bytes) a message of this exchange is held to instead of
        ``limits.upstream_message_bytes`` (a list page: ``bytes_per_candidate``). ``on_headers``
        sees the final response's headers (lower-case names) before its result is read (the
        handshake takes the session's ``Mcp-Session-Id`` from them)."""
        bound = bound or (MESSAGE_BOUND_KEY, self._max_message_bytes)
        headers = await self._authorized(headers)
        for _ in range(MAX_REDIRECTS + 2):
            response = await self._post_once(self._encode(message, headers), message.get("id"), on_message, bound)
            if self._on_status is not None:
                self._on_status(response.status)
            if response.status == 401 and self._auth is not None and (renewed := await self._renewed(headers)):
                headers = renewed
                continue  # refused before it ran: safe to send again, with a new token
            location = response.headers.get(b"location") if response.status in (307, 308) else None
            if location is None or not self._follow(location.decode("latin-1")):
                self.exchanges += 1
                if on_headers is not None and 200 <= response.status < 300:
                    on_headers(response.headers)
                if resume and await response.unanswered() and response.last_event_id is not None:
                    response = await self._resume(response, headers, on_message, bound)
                return await _result_of(response)
        raise ResponseError({"code": -32600, "message": "too many redirects"})

    async def _authorized(self, headers: Mapping[str, str]) -> Mapping[str, str]:
        """``headers`` with the bearer token, when the source authenticates."""
        if self._auth is None:
            return headers
        return {**headers, "authorization": f"Bearer {await self._auth.token()}"}

    async def _renewed(self, headers: Mapping[str, str]) -> Mapping[str, str] | None:
        """``headers`` with a renewed token after a ``401``; ``None`` when the token endpoint
        gave the same one again (the upstream's refusal stands)."""
        assert self._auth is not None
        rejected = str(headers.get("authorization", ""))[len("Bearer ") :]
        renewed = await self._auth.renew(rejected)
        return None if renewed == rejected else {**headers, "authorization": f"Bearer {renewed}"}

    async def _resume(
        self, broken: _Response, headers: Mapping[str, str], on_message: OnMessage | None, bound: tuple[str, int]
    ) -> _Response:
        """Follow a request stream the server ended before the response (servers do it on
        purpose, to make clients poll): after the server's ``retry`` delay (else
        :data:`RESUME_DELAY_MS`), ``GET`` the endpoint with ``Last-Event-ID`` and read on, as
        the SDK's transport does. A resumed stream that ends again is resumed again; after
        :data:`MAX_RESUME_FAILURES` attempts in a row that fail, the exchange is broken."""
        last_id, retry_ms, failures = broken.last_event_id, broken.retry_ms, 0
        while True:
            await anyio.sleep((retry_ms if retry_ms is not None else RESUME_DELAY_MS) / 1000)
            head = {**headers, "accept": "text/event-stream", "last-event-id": str(last_id)}
            try:
                get = self._encode_get(head)
                response = await self._post_once(get, broken.request_id, on_message, bound, until_answer=True)
            except UpstreamUnavailableError:
                response = None
            if response is None or not response.sse:
                failures += 1
                if failures >= MAX_RESUME_FAILURES:
                    raise UpstreamUnavailableError("the response stream ended and could not be resumed")
                continue
            if not await response.unanswered():
                return response
            failures = 0
            last_id = response.last_event_id or last_id
            retry_ms = response.retry_ms if response.retry_ms is not None else retry_ms

    async def send(self, message: Mapping[str, Any], headers: Mapping[str, str]) -> int:
        """POST ``message`` — a notification, or a response to the server's own request — with
        ``headers`` added, and return the HTTP status (a server accepts it with ``202`` and an
        empty body, which is read so the connection is reused). No JSON-RPC answer is expected,
        so none is looked for; raises :class:`UpstreamUnavailableError` when the exchange breaks."""
        bound = (MESSAGE_BOUND_KEY, self._max_message_bytes)
        headers = await self._authorized(headers)
        for _ in range(MAX_REDIRECTS + 1):
            response = await self._post_once(self._encode(message, headers), None, None, bound)
            if response.status == 401 and self._auth is not None and (renewed := await self._renewed(headers)):
                headers = renewed
                continue
            location = response.headers.get(b"location") if response.status in (307, 308) else None
            if location is None or not self._follow(location.decode("latin-1")):
                self.exchanges += 1
                return response.status
        return 310  # too many redirects: what the caller sees as a non-2xx status

    async def stream(
        self, headers: Mapping[str, str], on_message: OnMessage, last_event_id: str | None = None
    ) -> StreamEnd:
        """``GET`` the endpoint as a server-sent event stream (a 2025-era session's standalone
        stream) and hand every message on it to ``on_message``, in order, until the server ends
        it; from ``last_event_id`` on when given (``Last-Event-ID``: the server replays what
        came after). Each event is held to ``limits.upstream_message_bytes``. Returns how it
        ended: the HTTP status, the last event id seen (where to resume) and the server's
        ``retry`` delay. :class:`UpstreamUnavailableError` when the exchange breaks."""
        head = {**(await self._authorized(headers)), "accept": "text/event-stream"}
        if last_event_id is not None:
            head["last-event-id"] = last_event_id
        bound = (MESSAGE_BOUND_KEY, self._max_message_bytes)
        response = await self._post_once(self._encode_bodyless(b"GET", head), None, on_message, bound)
        await response.unanswered()  # an event the stream's end completed
        return StreamEnd(response.status, response.last_event_id or last_event_id, response.retry_ms)

    async def delete(self, headers: Mapping[str, str]) -> int:
        """``DELETE`` the endpoint (a 2025-era client ending its session); the HTTP status."""
        head = await self._authorized(headers)
        bound = (MESSAGE_BOUND_KEY, self._max_message_bytes)
        response = await self._post_once(self._encode_bodyless(b"DELETE", head), None, None, bound)
        return response.status

    def _follow(self, location: str) -> bool:
        """Adopt a same-origin redirect target for this and every later request (as the SDK's
        transport follows same-origin redirects); ``False`` for another origin."""
        parts = urlsplit(location)
        if parts.netloc and (parts.hostname != self._host or (parts.port or 80) != self._port):
            return False
        self._target = ((parts.path or "/") + (f"?{parts.query}" if parts.query else "")).encode()
        return True

    async def _post_once(
        self,
        request: bytes,
        request_id: Any,
        on_message: OnMessage | None,
        bound: tuple[str, int],
        *,
        until_answer: bool = False,
    ) -> _Response:
        for attempt in (0, 1):
            stream, sock, reused = await self._checkout()
            done = False
            try:
                response, keep = await self._exchange(stream, request, request_id, on_message, bound, until_answer)
                done = True
            except _StaleConnection:
                if not reused or attempt:
                    raise UpstreamUnavailableError("connection closed by the upstream") from None
                continue  # the server closed an idle keep-alive connection: it never saw this request
            except (OSError, anyio.BrokenResourceError, anyio.EndOfStream, httptools.HttpParserError) as exc:
                raise UpstreamUnavailableError(type(exc).__name__) from None
            finally:
                if not done:
                    with anyio.CancelScope(shield=True):
                        await stream.aclose()
            if keep and not self._closed and len(self._idle) < self._max_idle:
                self._idle.append((stream, sock, anyio.current_time()))
            else:
                with anyio.CancelScope(shield=True):
                    await stream.aclose()
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def _encode_get(self, headers: Mapping[str, str]) -> bytes:
        return self._encode_bodyless(b"GET", headers)

    def _encode_bodyless(self, verb: bytes, headers: Mapping[str, str]) -> bytes:
        merged = {**self._fixed, **{k.lower(): v for k, v in headers.items()}}
        merged.pop("content-type", None)
        head = verb + b" " + self._target + b" HTTP/1.1\r\n"
        return head + "".join(f"{k}: {v}\r\n" for k, v in merged.items()).encode("latin-1") + b"\r\n"

    def _encode(self, message: Mapping[str, Any], headers: Mapping[str, str]) -> bytes:
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        merged = {**self._fixed, **{k.lower(): v for k, v in headers.items()}, "content-length": str(len(body))}
        head = b"POST " + self._target + b" HTTP/1.1\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in merged.items()).encode("latin-1") + b"\r\n"
        return head + body

    async def _checkout(self) -> tuple[ByteStream, socket.socket, bool]:
        if self._closed:
            raise UpstreamUnavailableError("connection pool closed")
        while self._idle:
            stream, sock, since = self._idle.pop()
            if anyio.current_time() - since < KEEPALIVE_EXPIRY_S and not _readable(sock):
                return stream, sock, True
            with anyio.CancelScope(shield=True):  # the server may be closing it right now
                await stream.aclose()
        try:
            with anyio.fail_after(self._connect_timeout_s):
                if self._tls:
                    context = self._ssl_context or ssl.create_default_context()
                    fresh: ByteStream = await anyio.connect_tcp(
                        self._host, self._port, tls=True, ssl_context=context, tls_standard_compatible=False
                    )
                else:
                    fresh = await anyio.connect_tcp(self._host, self._port)
        except (OSError, TimeoutError) as exc:
            raise UpstreamUnavailableError(type(exc).__name__) from None
        return fresh, fresh.extra(SocketAttribute.raw_socket), False

    def refused(self, bound: tuple[str, int], size: int) -> MessageBoundError:
        """A message passed ``bound`` (config key, limit) at ``size``: the call's error, logged for
        the operator. Raised while reading, the connection is then dropped (the rest is never
        read), which on the 2026 wire is also the request's cancellation."""
        key, limit = bound
        log.warning("upstream %s: message over %s (%d bytes) refused after %d bytes", self._source, key, limit, size)
        telemetry.upstream_messages_refused.add(1, {"source": self._source, "bound": key})
        return MessageBoundError(key, limit, size)

    async def _exchange(
        self,
        stream: ByteStream,
        request: bytes,
        request_id: Any,
        on_message: OnMessage | None,
        bound: tuple[str, int],
        until_answer: bool,
    ) -> tuple[_Response, bool]:
        response = _Response(request_id=request_id, max_bytes=bound[1])
        parser = httptools.HttpResponseParser(response)
        response.parser = parser
        try:
            await stream.send(request)
        except (anyio.BrokenResourceError, OSError):
            raise _StaleConnection() from None
        received = 0
        while not response.complete:
            try:
                data = await stream.receive(65536)
            except anyio.EndOfStream:
                if received == 0:  # written, then closed: the upstream may have run it, never resend
                    raise
                parser.feed_data(b"")  # a body delimited by the connection's end
                break
            received += len(data)
            try:
                parser.feed_data(data)
            except httptools.HttpParserCallbackError:
                if response.refused:
                    raise self.refused(bound, response.refused) from None
                raise
            if response.is_sse(parser):
                for other in await response.take_messages():
                    if on_message is not None:
                        await on_message(other)
                    else:
                        log.debug("fast lane: skipped a message on a response stream")
                if response.answer is not None and until_answer and not response.complete:
                    # A resumed stream may stay open after the response: stop there, and do not
                    # pool a connection whose stream was not read to its end.
                    response.status = parser.get_status_code()
                    response.parser = None
                    return response, False
        if not response.complete:
            raise anyio.EndOfStream  # the connection ended inside the response
        response.status = parser.get_status_code()
        response.parser = None
        return response, response.keep_alive


class _MessageTooLarge(Exception):
    """Raised inside httptools' body callback: a message passed the poster's bound."""


class _StaleConnection(Exception):
    """The request could not be written: the server had closed the connection."""


def _readable(sock: socket.socket) -> bool:
    """Whether an idle connection (its socket) has something to read: the server's FIN or
    reset, or bytes no request asked for. Either way it must not carry another request."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):  # closed underneath us
        return True
    return bool(readable)


def _event_end(body: bytes, start: int) -> tuple[int, int]:
    """Where the first complete SSE event after ``start`` ends, and its separator's length."""
    ends = [(i, len(sep)) for sep in (b"\r\n\r\n", b"\n\n") if (i := body.find(sep, start)) >= 0]
    return min(ends) if ends else (-1, 0)


def _is_response(message: Any, request_id: Any) -> bool:
    return isinstance(message, dict) and message.get("id") == request_id and "method" not in message


async def _result_of(response: _Response) -> dict[str, Any]:
    request_id = response.request_id
    body = b"".join(response.body)
    ctype = response.headers.get(b"content-type", b"").lower()
    if response.status >= 400 or response.status < 200 or response.status == 202:
        if ctype.startswith(b"application/json"):
            try:
                parsed = await parse_message(body)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
                raise ResponseError(parsed["error"])
        if response.status == 404:
            raise ResponseError({"code": -32600, "message": "Session terminated"})
        if response.status == 202:
            raise ResponseError({"code": -32600, "message": "server answered a request with 202 Accepted"})
        raise ResponseError({"code": -32603, "message": "Server returned an error response"})
    if ctype.startswith(b"application/json"):
        messages = [await parse_message(body)]  # in slices when long (ADR 0040)
    elif ctype.startswith(b"text/event-stream"):
        # an event the stream's end completed
        events = [m for m, _, _ in await _sse_events(body, response.sse_offset) if m is not None]
        messages = [m for m in (response.answer, *events) if m is not None]
    else:
        raise ResponseError({"code": -32600, "message": f"Unexpected content type: {ctype.decode('latin-1')}"})
    for message in messages:
        if _is_response(message, request_id):
            if isinstance(message.get("error"), dict):
                raise ResponseError(message["error"])
            result = message.get("result")
            if not isinstance(result, dict):
                raise ResponseError({"code": -32603, "message": "malformed response from the upstream"})
            return result
        log.debug("fast lane: skipped a message on a response stream")
    raise UpstreamUnavailableError("the response stream ended without a response")


async def _sse_events(raw: bytes, start: int = 0, end: int | None = None) -> list[tuple[Any, str | None, int | None]]:
    """``(message, id, retry)`` for each SSE event of ``raw[start:end]``: ``message`` is its JSON
    (events of type ``message`` with data; ``None`` for a priming event, which carries only an
    id), ``id`` and ``retry`` its fields or ``None``. Lines end with CRLF, LF or CR. A data line
    is taken as a view of ``raw`` (a 30 MB event is copied once, into its JSON's bytes) and a
    long event's JSON is parsed in slices (ADR 0040)."""
    out: list[tuple[Any, str | None, int | None]] = []
    view = memoryview(raw)
    data: list[memoryview] = []
    event, event_id, retry = b"message", None, None
    for a, b in [*await _lines(raw, start, len(raw) if end is None else end), (0, 0)]:
        if a < b:
            if raw.startswith(b"data:", a, b):
                data.append(view[a + 6 if raw.startswith(b"data: ", a, b) else a + 5 : b])
            elif raw.startswith(b"event:", a, b):
                event = raw[a + 6 : b].strip()
            elif raw.startswith(b"id:", a, b):
                event_id = raw[a + 3 : b].strip().decode("utf-8", "replace") or None
            elif raw.startswith(b"retry:", a, b) and raw[a + 6 : b].strip().isdigit():
                retry = int(raw[a + 6 : b].strip())
            continue
        has_data = event == b"message" and any(len(d) for d in data)
        joined = b"\n".join(data) if has_data else b""
        if len(joined) > SLICED_BYTES:
            await anyio.lowlevel.checkpoint()
        message = await _json_or_none(joined) if has_data else None
        if message is not None or event_id is not None or retry is not None:
            out.append((message, event_id, retry))
        data, event, event_id, retry = [], b"message", None, None
    return out


async def _lines(raw: bytes, start: int, end: int) -> list[tuple[int, int]]:
    """``(start, end)`` of each line of ``raw[start:end]`` (ended by CRLF, LF or CR; an empty
    line is an event's end): found by ``bytes.find``, nothing copied; the loop gets a turn
    after each search through a long line."""
    out: list[tuple[int, int]] = []
    pos = start
    while pos < end:
        lf = raw.find(b"\n", pos, end)
        if (lf if lf >= 0 else end) - pos > SLICED_BYTES:
            await anyio.lowlevel.checkpoint()
        cr = raw.find(b"\r", pos, lf if lf >= 0 else end)
        stop = cr if cr >= 0 else (lf if lf >= 0 else end)
        out.append((pos, stop))
        if stop >= end:
            break
        pos = stop + 2 if raw.startswith(b"\r\n", stop) else stop + 1
    return out


async def _json_or_none(data: bytes) -> Any:
    """An event's JSON, or ``None`` for data that is not JSON: garbage between messages is
    skipped (logged), as the SDK's client skips it, never the end of the exchange."""
    try:
        return await parse_message(data)
    except ValueError:
        log.warning("fast lane: skipped an SSE event of %d bytes that is not JSON", len(data))
        return None
