"""Bounds at the HTTP edge (I18): connections, descriptors, request heads and bodies.

This module is over 400 lines because the four bounds share one refusal format (:func:`refuse`)
and the connection guard and its uvicorn protocol are two halves of one state machine, which
read best side by side.

Every resource a client can make the gateway hold here has a bound and a clear refusal:

* **Connections** (:class:`ConnectionGuard`). At most ``connections`` downstream connections are
  open. A connection is *idle* while it waits for a request head (just accepted, or between
  keep-alive requests); at the bound the oldest idle connection is closed to make room, so a
  flood of connections that send nothing cannot lock out a client that sends a request
  (``/healthz`` keeps answering). Only when every open connection is serving a request is the
  new one refused (503, closed). A head must complete within ``header_timeout_s`` of the idle
  phase starting, or the connection is closed (408 if it sent part of one): half-open and
  slowloris sockets do not accumulate. uvicorn alone bounds none of this: its
  ``limit_concurrency`` answers 503 only once a request head arrived, and it arms no timer on a
  connection that never sends one.
* **Descriptors** (:func:`descriptor_budget`). The soft ``RLIMIT_NOFILE`` is raised to the hard
  limit at startup, and the connection bound is clamped so that ``fd_reserve`` descriptors (plus
  the listen backlog, accepted in one loop tick before any guard runs) always stay free for config
  reads, upstream processes and connections, and logs. Accept failures that still happen are
  logged rate-limited (:func:`install_accept_error_handler`): asyncio logs one traceback per
  failed ``accept()``, 100 per loop tick, which is how 20,000 idle sockets wrote 86 MB of log.
* **Request heads** (in the guard's protocol). The request line plus headers, through the blank
  line that ends them, may take at most ``header_bytes``; past that the answer is 431 and the
  connection closes, before the parser or the app sees the excess. httptools (the parser
  uvicorn picks) has no limit of its own: it buffers a header of any size (a 100 MB header cost
  400 MB of RSS). h11 has one (``h11_max_incomplete_event_size``) but costs the hot path.
* **Request bodies** (:class:`BodyLimit`). Bodies are counted while they stream; past the
  path's limit the answer is 413 at once (``Connection: close``), before the rest is read.

The edge checks here and in ``api/lifecycle``, ``api/host_check`` and ``api/mcp_auth`` are plain
steps, not ASGI wrappers: each returns "go on" or a :class:`Refusal`, and one function runs them
in order (``api/plane/pipeline.py`` for ``/mcp``, ``api/http_app.py`` for ``/v1`` and ``/ui``).

Refusals on ``/mcp`` are JSON-RPC error objects (``id: null``) so MCP clients can read them;
elsewhere they are the control API's ``{"error": {"code", "message"}}`` shape."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import anyio
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("mcp_reconciler.http")

#: Connections accepted per loop tick (and the listen backlog): accepted before any guard sees
#: them, so they count against the descriptor reserve, twice (accepted, and evicted-not-yet-closed).
ACCEPT_BACKLOG = 128

#: The kernel's accept queue, set on the listening socket after asyncio set it to
#: :data:`ACCEPT_BACKLOG`: queued connections hold no descriptor of ours until accepted.
LISTEN_QUEUE = 1024

_RPC_INVALID_REQUEST = -32600


# -- refusals -------------------------------------------------------------------------------------


def refusal_body(path: str, code: str, message: str, *, rpc_code: int, retryable: bool) -> bytes:
    """The body of a refusal: a JSON-RPC error on ``/mcp``, the control API's error shape elsewhere."""
    if path == "/mcp" or path.startswith("/mcp/"):
        error = {"code": rpc_code, "message": message, "data": {"code": code, "retryable": retryable}}
        return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    return json.dumps({"error": {"code": code, "message": message}}).encode()


@dataclass(frozen=True, slots=True)
class Refusal:
    """An edge check's answer instead of the request's: a status, its headers and a body, sent
    by whoever ran the check (the plane's pipeline, or the wrapper in front of ``/v1``)."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes

    @classmethod
    def json(cls, status: int, body: bytes, *headers: tuple[bytes, bytes]) -> Refusal:
        """A JSON refusal of ``body`` with ``headers`` after the content type and length."""
        head = ((b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers)
        return cls(status, head, body)

    async def send(self, send: Send) -> None:
        """Answer with this refusal."""
        await send({"type": "http.response.start", "status": self.status, "headers": list(self.headers)})
        await send({"type": "http.response.body", "body": self.body})


def refusal(
    scope: Scope,
    status: int,
    code: str,
    message: str,
    *,
    rpc_code: int = _RPC_INVALID_REQUEST,
    retryable: bool = False,
    headers: Mapping[str, str] | None = None,
) -> Refusal:
    """A refusal with ``status`` and ``Connection: close`` (whatever the client still sends is
    not read): a JSON-RPC error on ``/mcp``, the control API's error shape elsewhere."""
    body = refusal_body(str(scope.get("path", "")), code, message, rpc_code=rpc_code, retryable=retryable)
    extra = ((k.lower().encode(), v.encode()) for k, v in (headers or {}).items())
    return Refusal.json(status, body, (b"connection", b"close"), *extra)


# -- bodies ---------------------------------------------------------------------------------------


class BodyLimit:
    """The body bound (I18): the request body of a path under one of ``limits``' prefixes
    (longest prefix wins) may be at most that many bytes. A declared ``Content-Length`` over the
    limit is refused before anything is read; a streamed (chunked) body is counted as it arrives
    and refused as soon as it passes the limit, so at most ``limit`` plus one chunk is ever held.
    :meth:`read` is the check: the whole body, or the refusal."""

    def __init__(self, limits: Mapping[str, int]) -> None:
        self._limits = sorted(limits.items(), key=lambda kv: len(kv[0]), reverse=True)
        self.refused = 0  # bodies refused at their bound (exported as gateway.limits.hits)

    def limit_for(self, path: str) -> int | None:
        """The body limit for ``path``, or ``None`` when no prefix covers it."""
        for prefix, limit in self._limits:
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return limit
        return None

    async def read(self, scope: Scope, receive: Receive) -> bytes | Refusal | None:
        """The request's whole body, a 413 :class:`Refusal` (``Connection: close``) as soon as the
        declared or counted body exceeds the path's limit, or ``None`` when the client left
        before sending all of it. A path no prefix covers is read unbounded (none on ``/mcp``)."""
        limit = self.limit_for(str(scope.get("path", "")))
        if limit is not None:
            for name, value in scope.get("headers", ()):
                if name == b"content-length":
                    try:
                        declared = int(value)
                    except ValueError:
                        declared = -1
                    if declared > limit:
                        return self._too_large(scope, limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None  # a disconnect
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if limit is not None and size > limit:
                return self._too_large(scope, limit)
            if not message.get("more_body", False):
                return chunk if not chunks else b"".join([*chunks, chunk])  # one message: no copy
            chunks.append(chunk)

    def _too_large(self, scope: Scope, limit: int) -> Refusal:
        self.refused += 1
        return refusal(scope, 413, "body_too_large", f"request bodies are limited to {limit} bytes")


# -- descriptors ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DescriptorBudget:
    """How many downstream connections the descriptor limit allows (see the module docstring)."""

    soft_limit: int
    in_use: int
    reserve: int
    connections: int


def raise_descriptor_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (best effort); returns the soft limit now."""
    try:
        import resource
    except ImportError:  # not POSIX: nothing to raise
        return 1 << 16
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return int(soft) if soft != resource.RLIM_INFINITY else 1 << 20


def descriptors_in_use() -> int:
    """Open descriptors of this process (``/proc/self/fd``; an estimate elsewhere)."""
    for where in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return max(0, len(os.listdir(where)) - 1)  # minus the one listdir itself held
    return 64


def descriptor_budget(configured: int, reserve: int, *, soft_limit: int | None = None) -> DescriptorBudget:
    """``configured`` connections clamped to what the descriptor limit leaves after the
    descriptors in use, ``reserve`` and twice :data:`ACCEPT_BACKLOG`. Never below 1."""
    soft = raise_descriptor_limit() if soft_limit is None else soft_limit
    in_use = descriptors_in_use()
    room = soft - in_use - reserve - 2 * ACCEPT_BACKLOG
    return DescriptorBudget(soft, in_use, reserve, max(1, min(configured, room)))


class AcceptErrorLog:
    """An asyncio exception handler that turns the event loop's per-``accept()`` tracebacks
    ("socket.accept() out of system resource") into one warning per ``interval_s`` with a
    count, and passes every other context to the previous handler."""

    MESSAGE = "socket.accept() out of system resource"

    def __init__(self, previous: Any, interval_s: float = 10.0) -> None:
        self._previous = previous
        self._interval_s = interval_s
        self._last = -float("inf")
        self.suppressed = 0
        self.total = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Log an ``accept()`` failure at most once per ``interval_s`` with the count suppressed since;
        hand any other context to the previous handler (or the loop's default)."""
        if context.get("message") != self.MESSAGE:
            if self._previous is not None:
                self._previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        self.total += 1
        now = time.monotonic()
        if now - self._last < self._interval_s:
            self.suppressed += 1
            return
        exc = context.get("exception")
        reason = errno.errorcode.get(getattr(exc, "errno", 0) or 0, type(exc).__name__)
        log.warning(
            "accept() failed: out of %s (%s); %d similar failures since the last report; "
            "raise the descriptor limit or lower gateway.limits.connections",
            "file descriptors" if reason in ("EMFILE", "ENFILE") else "system resources",
            reason,
            self.suppressed,
        )
        self._last, self.suppressed = now, 0


@contextlib.contextmanager
def install_accept_error_handler(interval_s: float = 10.0) -> Iterator[AcceptErrorLog]:
    """Install :class:`AcceptErrorLog` on the running loop for the block; restore after."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    handler = AcceptErrorLog(previous, interval_s)
    loop.set_exception_handler(handler)
    try:
        yield handler
    finally:
        loop.set_exception_handler(previous)


# -- connections ----------------------------------------------------------------------------------


def _plain(status: bytes, text: bytes, *extra: bytes) -> bytes:
    head = [b"HTTP/1.1 " + status, b"content-type: text/plain; charset=utf-8", b"content-length: %d" % len(text)]
    return b"\r\n".join([*head, b"connection: close", *extra, b"", b""]) + text


_REFUSE_503 = _plain(b"503 Service Unavailable", b"every connection slot is busy; retry shortly\n", b"retry-after: 1")
_REFUSE_408 = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_REFUSE_431 = _plain(b"431 Request Header Fields Too Large", b"request head too large\n")


class ConnectionGuard:
    """Bookkeeping for the connection bound, the idle order and the head timeout (see the module
    docstring). One per served app; :meth:`protocol` builds the uvicorn protocol class that
    reports to it, and :meth:`run` is its timeout sweep (run it in the owner's task group)."""

    def __init__(self, *, connections: int, header_timeout_s: float, header_bytes: int) -> None:
        if connections < 1 or header_timeout_s <= 0 or header_bytes < 1:
            raise ValueError("connection limits must be positive")
        self.max_connections = connections
        self.header_timeout_s = header_timeout_s
        self.header_bytes = header_bytes
        self._open: set[GuardedProtocol] = set()
        self._idle: OrderedDict[GuardedProtocol, float] = OrderedDict()
        self.evicted = 0
        self.refused = 0
        self.timed_out = 0
        self.oversized = 0

    @property
    def open(self) -> int:
        """Connections open now."""
        return len(self._open)

    @property
    def idle(self) -> int:
        """Open connections waiting for a request head."""
        return len(self._idle)

    def protocol(self) -> type[GuardedProtocol]:
        """A uvicorn HTTP protocol class (httptools) bound to this guard."""
        return type("GuardedHttpToolsProtocol", (GuardedProtocol,), {"guard": self})

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Close connections whose head did not complete in time; runs until cancelled."""
        task_status.started()
        tick = min(1.0, self.header_timeout_s / 4)
        while True:
            await anyio.sleep(tick)
            self.sweep(time.monotonic())

    def sweep(self, now: float) -> int:
        """Close every idle connection whose head timeout passed; returns how many."""
        closed = 0
        deadline = now - self.header_timeout_s
        while self._idle:
            proto, since = next(iter(self._idle.items()))
            if since > deadline:
                break
            del self._idle[proto]
            self.timed_out += 1
            closed += 1
            proto.drop(_REFUSE_408 if proto.head_bytes else b"")
        return closed

    # -- called by the protocol -------------------------------------------------------------------

    def opened(self, proto: GuardedProtocol) -> None:
        """Register a new connection as idle; over the bound, close the oldest idle other connection
        (408 if it sent part of a head), or refuse this one with 503 if none is idle."""
        self._open.add(proto)
        self._idle[proto] = time.monotonic()
        if len(self._open) <= self.max_connections:
            return
        # At the bound: make room by closing the oldest idle connection other than this one.
        for victim in self._idle:
            if victim is not proto:
                del self._idle[victim]
                self._open.discard(victim)
                self.evicted += 1
                victim.drop(_REFUSE_408 if victim.head_bytes else b"")
                return
        self.refused += 1
        self._forget(proto)
        proto.drop(_REFUSE_503)

    def busy(self, proto: GuardedProtocol) -> None:
        """A request head completed on ``proto``: it is no longer idle (no head timeout while it is served)."""
        self._idle.pop(proto, None)

    def waiting(self, proto: GuardedProtocol) -> None:
        """``proto`` waits for its next keep-alive request head: idle again, newest in the eviction order."""
        if proto in self._open:
            self._idle[proto] = time.monotonic()
            self._idle.move_to_end(proto)

    def oversized_head(self, proto: GuardedProtocol) -> None:
        """``proto``'s head passed ``header_bytes``: answer 431 and close it."""
        self.oversized += 1
        self._forget(proto)
        proto.drop(_REFUSE_431)

    def closed(self, proto: GuardedProtocol) -> None:
        """``proto`` closed: forget it (idempotent)."""
        self._forget(proto)

    def _forget(self, proto: GuardedProtocol) -> None:
        self._open.discard(proto)
        self._idle.pop(proto, None)


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol reporting to a :class:`ConnectionGuard`: idle from
    connection (and after each keep-alive response) until a request head completes.

    The head is measured in raw bytes, through its terminating blank line, *before* the parser
    sees them: a head over the limit is refused whether it arrives in one read or trickles in,
    and the app never starts for it."""

    guard: ClassVar[ConnectionGuard]
    head_bytes: int = 0
    _in_head: bool = True
    _tail: bytes = b""  # the last bytes of the head so far: a terminator may span two reads

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the head phase and register with the guard, which may close this connection at once."""
        super().connection_made(transport)
        self._new_head()
        self.guard.opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        """Tell the guard the connection is gone, then let uvicorn clean up."""
        self.guard.closed(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Count head bytes before the parser sees them; past ``header_bytes`` the guard answers 431
        and nothing more is parsed."""
        if self._in_head:
            seen = self._tail + data
            ends = [i + len(t) for t in (b"\r\n\r\n", b"\n\n") if (i := seen.find(t)) >= 0]
            counted = min(ends) - len(self._tail) if ends else len(data)
            if self.head_bytes + counted > self.guard.header_bytes:
                self.guard.oversized_head(self)
                return
            self.head_bytes += counted
            self._tail = seen[-3:]
        super().data_received(data)

    def on_headers_complete(self) -> None:
        """The head completed: the connection is busy until its response completes."""
        self._in_head = False
        self.guard.busy(self)
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        """After a response on a keep-alive connection with no pipelined request queued, wait for the next
        head as an idle connection (the head timeout applies again)."""
        super().on_response_complete()
        transport, cycle = self.transport, self.cycle
        open_ = transport is not None and not transport.is_closing()
        # A queued pipelined request is not a wait for a new head.
        if open_ and cycle is not None and cycle.keep_alive and not self.pipeline:
            self._new_head()
            self.guard.waiting(self)

    def _new_head(self) -> None:
        self._in_head, self.head_bytes, self._tail = True, 0, b""

    def drop(self, farewell: bytes = b"") -> None:
        """Close now (``farewell``, if any, is written first)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if farewell:
            with contextlib.suppress(Exception):
                transport.write(farewell)
        transport.close()
