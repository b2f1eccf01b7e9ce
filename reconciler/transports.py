"""Transports for upstream connections, built from a spec's transport description.

Every transport's read stream is wrapped so that its end (stdio EOF or process exit, HTTP
stream end) is observed: the SDK has no public "closed" hook, and a dead upstream must mark its
source dirty instead of failing silently on the next call.

stdio processes are started by our stdio channel (``reconciler/stdio_peer.py``, ADR 0025) in
their own session (process group), their output read line by line under
``limits.upstream_message_bytes``, and stopped the way docs/DESIGN.md (I14, I15) says: close
stdin, wait, SIGTERM the group, wait, SIGKILL.
The gateway never signals any other process (I15).

A stdio upstream's stderr is a pipe read by :func:`~reconciler.logsource.pump_stderr` (one task
per connection, owned by the transport's context): every line becomes a log record labeled with
the source, redacted and rate-limited, instead of raw bytes on the gateway's stderr."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Self, TextIO

import anyio
import httpx2
from mcp import StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.reconciler.direct_answers import DirectAnswers, SessionHeaders
from mcp_reconciler.reconciler.failure_cause import Evidence
from mcp_reconciler.reconciler.fasthttp import JsonRpcPoster
from mcp_reconciler.reconciler.http_peer import HttpPeer
from mcp_reconciler.reconciler.keepalive import KeepAliveTransport
from mcp_reconciler.reconciler.logsource import StderrSink, pump_stderr
from mcp_reconciler.reconciler.model import SourceSpec
from mcp_reconciler.reconciler.peer_contract import DEFAULT_UPSTREAM_MESSAGE_BYTES
from mcp_reconciler.reconciler.stdio_peer import stdio_channel
from mcp_reconciler.reconciler.upstream_auth import ClientCredentialsAuth, client_credentials_auth

STREAM_TYPES = ("stdio", "http", "sse")


class ObservedReadStream:
    """Wraps a transport read stream (the SDK's ``ReadStream`` protocol) and calls ``on_end``
    once when it ends or breaks. ``last_context`` is forwarded for the HTTP transports."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end
        self._ended = False

    @property
    def last_context(self) -> Any:
        """The inner stream's ``last_context`` (the HTTP transports expose one), or None."""
        return getattr(self._inner, "last_context", None)

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._on_end()

    async def receive(self) -> Any:
        """The next message; when the stream ends or breaks, ``on_end`` runs (once) and the error propagates."""
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._end()
            raise

    async def aclose(self) -> None:
        """Close the inner stream (does not call ``on_end``)."""
        await self._inner.aclose()

    def __aiter__(self) -> ObservedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def stdio_parameters(transport: Mapping[str, Any]) -> StdioServerParameters:
    """``command: python`` (or ``python3``) means the gateway's own interpreter, so bundled and
    example upstreams run in the gateway's environment; give a path to use another one."""
    command = str(transport["command"])
    if command in ("python", "python3"):
        command = sys.executable
    return StdioServerParameters(
        command=command,
        args=[str(a) for a in transport.get("args", ())],
        env={str(k): str(v) for k, v in (transport.get("env") or {}).items()} or None,
        cwd=transport.get("cwd"),
    )


@asynccontextmanager
async def _stdio_with_stderr_pump(
    source: str,
    params: StdioServerParameters,
    *,
    message_bytes: int,
    list_bytes: int | None,
    list_entries: int | None,
    evidence: Evidence | None = None,
    noise: Any = (),
) -> AsyncIterator[tuple[Any, Any]]:
    """Our stdio channel (``reconciler/stdio_peer.py``) with the process's stderr on a pipe that
    :func:`pump_stderr` logs and notes in ``evidence`` with the exit status (the cause of a
    failed connect, ``reconciler/failure_cause.py``). The spawn happens before any task group
    of ours, so a spawn failure propagates as itself."""
    read_fd, write_fd = os.pipe()
    pumping = False
    try:
        channel = stdio_channel(
            source,
            params,
            message_bytes=message_bytes,
            list_bytes=list_bytes,
            list_entries=list_entries,
            stderr=write_fd,
            on_exit=evidence.process_exited if evidence is not None else None,
        )
        async with channel as streams:
            os.close(write_fd)  # the child has its copy; ours would keep the pipe from ending
            write_fd = -1
            async with anyio.create_task_group() as tg:
                tg.start_soon(pump_stderr, read_fd, StderrSink(source, evidence, tuple(noise)))
                pumping = True
                try:
                    yield streams
                finally:
                    tg.cancel_scope.cancel()  # the pump logs what is in the pipe, then stops
    finally:
        if write_fd >= 0:
            os.close(write_fd)
        if not pumping:
            os.close(read_fd)


def _headers(transport: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (transport.get("headers") or {}).items()}


def http_peer_for(
    spec: SourceSpec,
    auth: ClientCredentialsAuth | None,
    *,
    message_bytes: int = DEFAULT_UPSTREAM_MESSAGE_BYTES,
    evidence: Evidence | None = None,
) -> JsonRpcPoster:
    """The keep-alive pool of ``spec``'s streamable-HTTP peer (``reconciler/http_peer.py``):
    its URL (``http://`` or ``https://``), headers, connect timeout, message bound and OAuth
    token (``auth``, the same one the SDK's transport uses for the handshake, so one token
    serves both); each request's HTTP status goes to ``evidence``."""
    t = spec.transport
    timeouts = t.get("timeouts") or {}
    return JsonRpcPoster(
        str(t["url"]),
        _headers(t),
        connect_timeout_s=float(timeouts.get("connect_s", 10.0)),
        max_message_bytes=message_bytes,
        source=spec.name,
        auth=auth,
        on_status=evidence.observe_status if evidence is not None else None,
    )


def transport_for(
    spec: SourceSpec,
    on_end: Callable[[], None],
    errlog: TextIO | None = None,
    *,
    message_bytes: int = DEFAULT_UPSTREAM_MESSAGE_BYTES,
    list_bytes: int | None = None,
    list_entries: int | None = None,
) -> Any:
    """An ``mcp.Client`` transport for ``spec`` whose end calls ``on_end``.

    ``transport["kind"]`` is ``stdio`` (command, args, env, cwd), ``http`` (url, headers, oauth)
    or ``sse`` (url, headers, oauth). Anything else is a configuration error. ``oauth`` makes
    the connection authenticate with its own client-credentials token
    (:mod:`reconciler.upstream_auth`); a downstream client's token is never sent upstream.
    ``message_bytes`` bounds each message a stdio or streamable-HTTP upstream sends,
    ``list_bytes`` and ``list_entries`` its list pages (ADR 0025, ADR 0030)."""
    t = spec.transport
    kind = t.get("kind")
    if kind not in STREAM_TYPES:
        raise ValueError(f"source {spec.name!r}: unknown transport kind {kind!r} (use stdio, http or sse)")

    target = Target()

    @asynccontextmanager
    async def connect() -> AsyncIterator[tuple[ObservedReadStream, Any]]:
        if kind == "stdio" and errlog is not None:
            params = stdio_parameters(t)
            async with stdio_channel(
                spec.name,
                params,
                message_bytes=message_bytes,
                list_bytes=list_bytes,
                list_entries=list_entries,
                stderr=errlog,
            ) as (read, write):
                yield ObservedReadStream(read, on_end), write
        elif kind == "stdio":
            async with _stdio_with_stderr_pump(
                spec.name,
                stdio_parameters(t),
                message_bytes=message_bytes,
                list_bytes=list_bytes,
                list_entries=list_entries,
                evidence=target.evidence,
                noise=t.get("stderr_noise") or (),
            ) as (read, write):
                yield ObservedReadStream(read, on_end), write
        elif kind == "http":
            timeouts = t.get("timeouts") or {}
            timeout = httpx2.Timeout(float(timeouts.get("connect_s", 10.0)), read=float(timeouts.get("call_s", 300.0)))
            # An explicit pool: httpx2's default of 100 connections (one held by the listen stream)
            # would make the 100th concurrent call wait silently for a free connection.
            limits = httpx2.Limits(max_connections=int(t.get("max_connections", 1024)), max_keepalive_connections=64)
            auth = client_credentials_auth(t.get("oauth"))
            # Keep-alive for request streams the SDK closes before their last bytes (keepalive.py).
            transport = KeepAliveTransport(limits=limits)
            # Answers to the server's requests go up without the SDK's writer (direct_answers.py).
            session = SessionHeaders()
            hooks: dict[str, list[Any]] = {
                "request": [session.observe],
                "response": [target.observe_response, session.observe_response],
            }
            poster = http_peer_for(spec, auth, message_bytes=message_bytes, evidence=target.evidence)
            try:
                async with httpx2.AsyncClient(
                    headers=_headers(t), timeout=timeout, transport=transport, auth=auth, event_hooks=hooks
                ) as http:
                    # The SDK's own bound on one SSE event is 1 MiB; the gateway's is the config's.
                    # (This client carries the handshake, the 2025 GET stream and 2026 listen
                    # streams only: every request goes through the peer, ADR 0030.)
                    async with streamable_http_client(
                        str(t["url"]), http_client=http, max_sse_event_size=message_bytes
                    ) as (read, write):
                        out = DirectAnswers(write, poster, session)
                        target.peer = HttpPeer(out, source=spec.name, list_bytes=list_bytes, list_entries=list_entries)
                        yield ObservedReadStream(read, on_end), out
            finally:
                target.peer = None
                await poster.aclose()
        else:
            timeouts = t.get("timeouts") or {}
            async with sse_client(
                str(t["url"]),
                headers=_headers(t),
                timeout=float(timeouts.get("connect_s", 10.0)),
                sse_read_timeout=float(timeouts.get("call_s", 300.0)),
                auth=client_credentials_auth(t.get("oauth")),
            ) as (read, write):
                yield ObservedReadStream(read, on_end), write

    target.connect = connect()
    return target


class Target:
    """What ``mcp.Client`` connects to (a ``Transport``: entered once), and the peer every
    request to a streamable-HTTP source goes through while its transport is open
    (``reconciler/http_peer.py``; ``None`` for stdio and SSE, whose requests go through the SDK's
    session over the transport)."""

    def __init__(self) -> None:
        self.connect: AbstractAsyncContextManager[tuple[ObservedReadStream, Any]] | None = None
        self.peer: HttpPeer | None = None
        #: What the transport saw of its upstream, for a failure's cause (``failure_cause.py``).
        self.evidence = Evidence()

    async def observe_response(self, response: httpx2.Response) -> None:
        """httpx2 response hook: note a POST's status (the SDK turns an error status into a
        generic JSON-RPC error; the operator needs "HTTP 401")."""
        if response.request.method == "POST":
            self.evidence.observe_status(response.status_code)

    async def __aenter__(self) -> tuple[ObservedReadStream, Any]:
        assert self.connect is not None
        return await self.connect.__aenter__()

    async def __aexit__(self, *exc: Any) -> bool | None:
        assert self.connect is not None
        return await self.connect.__aexit__(*exc)
