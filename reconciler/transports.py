"""Transports for upstream connections, built from a spec's transport description, each with the
gateway's own JSON-RPC session over it (``reconciler/jsonrpc_peer.py``, ADR 0037).

- **stdio**: our channel (``reconciler/stdio_peer.py``, ADR 0025) under a
  :class:`~reconciler.jsonrpc_peer.StreamSession`. Processes are started in their own session
  (process group), their output read line by line under ``limits.upstream_message_bytes``, and
  stopped the way docs/DESIGN.md (I14, I15) says: close stdin, wait, SIGTERM the group, wait,
  SIGKILL. The gateway never signals any other process (I15). stderr is a pipe read by
  :func:`~reconciler.logsource.pump_stderr` (one task per connection): every line becomes a
  log record labeled with the source, redacted and rate-limited.
- **streamable HTTP**: :class:`~reconciler.http_peer.HttpPeer`, the session over the source's
  keep-alive pool (``reconciler/fasthttp.py``; TLS, OAuth, both eras).
- **legacy SSE** (deprecated by the spec): the SDK's ``sse_client`` transport — the one
  documented exception (ADR 0037) — over our bounded HTTP transport
  (``reconciler/sse_channel.py``, ADR 0043: each event held to its bound while read), under a
  :class:`~reconciler.jsonrpc_peer.StreamSession`.

The end of a stream wire (stdio EOF or process exit, the SSE stream's end) ends the session,
which calls ``on_end``: a dead upstream marks its source dirty instead of failing silently on
the next call."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TextIO

import anyio
from mcp import StdioServerParameters

from mcp_reconciler.reconciler.failure_cause import Evidence
from mcp_reconciler.reconciler.fasthttp import JsonRpcPoster
from mcp_reconciler.reconciler.http_peer import HttpPeer
from mcp_reconciler.reconciler.jsonrpc_peer import Inbound, PeerSession, StreamSession
from mcp_reconciler.reconciler.logsource import StderrSink, pump_stderr
from mcp_reconciler.reconciler.model import SourceSpec
from mcp_reconciler.reconciler.peer_contract import DEFAULT_UPSTREAM_MESSAGE_BYTES
from mcp_reconciler.reconciler.sse_channel import sse_channel
from mcp_reconciler.reconciler.stdio_peer import stdio_channel
from mcp_reconciler.reconciler.upstream_auth import ClientCredentialsAuth, client_credentials_auth

STREAM_TYPES = ("stdio", "http", "sse")


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
    token (``auth``: the handshake, the streams and every request share it); each exchange's
    HTTP status goes to ``evidence``."""
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
) -> Target:
    """The :class:`Target` for ``spec``: its session's end calls ``on_end``.

    ``transport["kind"]`` is ``stdio`` (command, args, env, cwd), ``http`` (url, headers, oauth)
    or ``sse`` (url, headers, oauth). Anything else is a configuration error. ``oauth`` makes
    the connection authenticate with its own client-credentials token
    (:mod:`reconciler.upstream_auth`); a downstream client's token is never sent upstream.
    ``message_bytes`` bounds each message an upstream sends, ``list_bytes`` and
    ``list_entries`` its list pages (ADR 0025, ADR 0030, ADR 0043)."""
    t = spec.transport
    kind = t.get("kind")
    if kind not in STREAM_TYPES:
        raise ValueError(f"source {spec.name!r}: unknown transport kind {kind!r} (use stdio, http or sse)")

    target = Target(on_end)

    @asynccontextmanager
    async def streams() -> AsyncIterator[tuple[Any, Any]]:
        if kind == "stdio" and errlog is not None:
            async with stdio_channel(
                spec.name,
                stdio_parameters(t),
                message_bytes=message_bytes,
                list_bytes=list_bytes,
                list_entries=list_entries,
                stderr=errlog,
            ) as pair:
                yield pair
        elif kind == "stdio":
            async with _stdio_with_stderr_pump(
                spec.name,
                stdio_parameters(t),
                message_bytes=message_bytes,
                list_bytes=list_bytes,
                list_entries=list_entries,
                evidence=target.evidence,
                noise=t.get("stderr_noise") or (),
            ) as pair:
                yield pair
        else:
            timeouts = t.get("timeouts") or {}
            async with sse_channel(
                spec.name,
                str(t["url"]),
                headers=_headers(t),
                connect_s=float(timeouts.get("connect_s", 10.0)),
                read_s=float(timeouts.get("call_s", 300.0)),
                auth=client_credentials_auth(t.get("oauth")),
                message_bytes=message_bytes,
                list_bytes=list_bytes,
                list_entries=list_entries,
            ) as pair:
                yield pair

    @asynccontextmanager
    async def open_session(inbound: Inbound) -> AsyncIterator[PeerSession]:
        if kind == "http":
            poster = http_peer_for(
                spec, client_credentials_auth(t.get("oauth")), message_bytes=message_bytes, evidence=target.evidence
            )
            try:
                async with anyio.create_task_group() as tg:
                    session = HttpPeer(
                        poster, inbound, tg, source=spec.name, list_bytes=list_bytes, list_entries=list_entries,
                        on_end=target.on_end,
                    )  # fmt: skip
                    target.peer = session
                    try:
                        yield session
                    finally:
                        await session.close()
                        tg.cancel_scope.cancel()
            finally:
                target.peer = None
                await poster.aclose()
            return
        async with over_channel(streams(), inbound, source=spec.name, on_end=target.on_end) as stream_session:
            yield stream_session

    target.open = open_session
    return target


class Target:
    """What an upstream connection opens (:meth:`open`: the transport and the gateway's session
    over it), and what the transport saw of its upstream (:attr:`evidence`). ``peer`` is the
    streamable-HTTP peer every request goes through while its session is open (``None`` for
    stdio and SSE)."""

    def __init__(self, on_end: Callable[[], None]) -> None:
        self.on_end = on_end
        self.open: Callable[[Inbound], AbstractAsyncContextManager[PeerSession]] = _unset
        self.peer: HttpPeer | None = None
        #: What the transport saw of its upstream, for a failure's cause (``failure_cause.py``).
        self.evidence = Evidence()


def _unset(inbound: Inbound) -> AbstractAsyncContextManager[PeerSession]:
    raise RuntimeError("target has no transport")


@asynccontextmanager
async def over_channel(
    channel: AbstractAsyncContextManager[tuple[Any, Any]], inbound: Inbound, *, source: str, on_end: Callable[[], None]
) -> AsyncIterator[StreamSession]:
    """A :class:`~reconciler.jsonrpc_peer.StreamSession` over a message channel (the (read,
    write) pair ``channel`` yields: ``SessionMessage`` items both ways), its reader running
    until the channel ends or the block is left."""
    async with channel as (read, write), anyio.create_task_group() as tg:
        session = StreamSession(read, write, inbound, tg, source=source, on_end=on_end)
        tg.start_soon(session.run)
        try:
            yield session
        finally:
            tg.cancel_scope.cancel()


def channel_target(
    channel: Callable[[], AbstractAsyncContextManager[tuple[Any, Any]]], source: str, on_end: Callable[[], None]
) -> Target:
    """A :class:`Target` over any message channel ``channel()`` opens (benchmarks comparing
    another transport, embeddings)."""
    target = Target(on_end)

    def open_session(inbound: Inbound) -> AbstractAsyncContextManager[PeerSession]:
        return over_channel(channel(), inbound, source=source, on_end=target.on_end)

    target.open = open_session
    return target


def in_process(server: Any, source: str, on_end: Callable[[], None]) -> Target:
    """A :class:`Target` for an in-process low-level ``mcp.server.Server`` (tests, embeddings):
    the server runs on a pair of memory streams (its public ``run``), and the session speaks to
    it as to any message channel."""

    @asynccontextmanager
    async def channel() -> AsyncIterator[tuple[Any, Any]]:
        to_server, server_read = anyio.create_memory_object_stream[Any](16)
        server_write, from_server = anyio.create_memory_object_stream[Any](16)
        async with anyio.create_task_group() as tg:

            async def serve() -> None:
                async with server_read, server_write:
                    await server.run(server_read, server_write, server.create_initialization_options())

            tg.start_soon(serve)
            try:
                yield from_server, to_server
            finally:
                tg.cancel_scope.cancel()

    return channel_target(channel, source, on_end)
