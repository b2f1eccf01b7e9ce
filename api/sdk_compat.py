"""Every use of an MCP SDK private, in one place (written against ``mcp`` 2.3; pyproject pins <2.4).

The gateway needs a few things the SDK offers no public way to do. Each is reached here and
nowhere else, and ``tests/unit/test_sdk_compat.py`` builds the SDK objects for real and fails
naming the attribute if an SDK release moves it:

1. **The connection behind a legacy request.** A handler's ``ctx.session`` is a new object per
   request; the per-connection ``Connection`` (its ``session_id``, scratch ``state``,
   ``exit_stack`` that unwinds on DELETE/EOF/idle timeout, and the ``send_*_list_changed``
   pushes) is only reachable as ``ServerSession._connection``. The ``Connection`` surface is
   public, but the front door touches it only through the functions below so that one module
   knows how a connection is found, keyed, watched and pushed to.
2. **Whether a legacy HTTP session's GET stream is open.** A push made before the client opens
   its standalone GET stream is dropped by the SDK (an event store cannot replay onto a first
   GET), so the front door holds pushes until it is open (ADR 0006). That needs the manager's
   session table (``StreamableHTTPSessionManager._server_instances``) and the transport's
   stream table (``StreamableHTTPServerTransport._request_streams`` keyed by
   ``streamable_http.GET_STREAM_KEY``).
3. **One event store per HTTP session.** The SDK hands one ``event_store`` to every session and
   stream ids are unique only within a session, so a shared store can replay one session's
   notification into another. :class:`GatewaySessionManager` overrides the manager's admission
   hook (``_admit_session``) and gives each new transport its own store (``_event_store``).
4. **An HTTP client with the MCP transports' defaults** (30 s connect/write/pool, 300 s read for
   held-open streams) for clients that must add headers: ``mcp.shared._httpx_utils`` is a
   private module. :func:`mcp_http_client` is used by the SDK's pinned runs and by tests.
5. **A request whose result the SDK would reject.** A task-augmented ``tools/call`` is answered
   with a ``CreateTaskResult``, but ``ClientSession.send_request`` validates every ``tools/call``
   result as a ``CallToolResult`` and raises. :func:`send_raw_request` sends through the
   session's stamp and dispatcher (``ClientSession._stamp``, ``._dispatcher``; the SDK's own
   ``listen()`` does the same) and returns the raw result for the caller to validate.

Import-time checks below catch a removed class-level hook at startup instead of at the first
request; instance attributes can only be checked on real objects (the unit tests do)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.server import ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.streamable_http import GET_STREAM_KEY, EventStore, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.dispatcher import CallOptions
from mcp.shared.inbound import MCP_NAME_HEADER, encode_header_value

from mcp_reconciler.reconciler.model import EntryKind

#: The SDK minor version this module was written and tested against (pyproject pins it).
TESTED_SDK = "2.3"

#: Key under which a connection without a transport session id (stdio, in-memory) keeps the
#: front door's binding key in its per-connection scratch ``state``.
_STATE_KEY = "gw.key"


class SDKChangedError(RuntimeError):
    """An SDK private this module relies on is gone or changed shape. The message names it."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"mcp SDK changed: {what} is missing or changed (api/sdk_compat.py was written for mcp {TESTED_SDK}.x)"
        )


def _require_hook(cls: type[Any], name: str) -> None:
    if not callable(getattr(cls, name, None)):
        raise SDKChangedError(f"{cls.__name__}.{name}")


_require_hook(StreamableHTTPSessionManager, "_admit_session")


# -- 1. the connection behind a request --------------------------------------------------------


def connection_of(ctx: ServerRequestContext[Any]) -> Connection:
    """The per-connection object behind ``ctx`` (``ServerSession._connection``): the same object
    for every request on one legacy connection, a fresh one per request in the 2026 era."""
    try:
        conn = ctx.session._connection
    except AttributeError:
        raise SDKChangedError("ServerSession._connection") from None
    return conn


def connection_key(conn: Connection) -> str:
    """A stable identity for ``conn``: its HTTP session id, else a key minted once and kept in the
    connection's scratch state (stdio and in-memory connections have no session id)."""
    key = conn.session_id or conn.state.setdefault(_STATE_KEY, uuid.uuid4().hex)
    return str(key)


def http_session_id(conn: Connection) -> str | None:
    """The streamable-HTTP session id of ``conn``; ``None`` on stdio and in-memory connections."""
    return conn.session_id


def on_connection_close(conn: Connection, callback: Callable[..., object], *args: object) -> None:
    """Run ``callback(*args)`` once when ``conn`` ends (HTTP DELETE, idle timeout, stdio EOF)."""
    conn.exit_stack.callback(callback, *args)


async def push_list_changed(conn: Connection, kinds: Iterable[EntryKind]) -> None:
    """Push one ``list_changed`` per kind group in ``kinds`` on ``conn`` (tools, then resources
    and templates as one, then prompts). Best effort in the SDK: it may raise if the connection
    is going away; the caller decides what a failed push means."""
    kinds = set(kinds)
    if EntryKind.TOOL in kinds:
        await conn.send_tool_list_changed()
    if kinds & {EntryKind.RESOURCE, EntryKind.RESOURCE_TEMPLATE}:
        await conn.send_resource_list_changed()
    if EntryKind.PROMPT in kinds:
        await conn.send_prompt_list_changed()


async def push_resource_updated(conn: Connection, uri: str) -> None:
    """Push ``notifications/resources/updated`` for ``uri`` on ``conn`` (best effort, like
    :func:`push_list_changed`)."""
    await conn.send_resource_updated(uri)


# -- 5. a request whose result the SDK would reject -----------------------------------------------


async def send_raw_request(session: ClientSession, request: Any, *, timeout_s: float | None = None) -> dict[str, Any]:
    """Send ``request`` (an ``mcp_types`` request model) on ``session`` exactly as
    ``send_request`` would — protocol stamp, ``Mcp-Name`` header, timeout (``timeout_s``, else
    the session's read timeout) — and return the raw result dict, unvalidated. Raises
    ``MCPError`` for an error response, a timeout or a closed connection, like ``send_request``."""
    try:
        stamp = session._stamp
        dispatcher = session._dispatcher
        default_timeout = session._session_read_timeout_seconds
    except AttributeError as exc:
        raise SDKChangedError(f"ClientSession.{exc.name}") from None
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    opts: CallOptions = {}
    stamp(data, opts)
    key = type(request).name_param
    name = (data.get("params") or {}).get(key) if key is not None else None
    if isinstance(name, str):
        opts.setdefault("headers", {}).setdefault(MCP_NAME_HEADER, encode_header_value(name))
    timeout = timeout_s if timeout_s is not None else default_timeout
    if timeout is not None:
        opts["timeout"] = timeout
    raw = await dispatcher.send_raw_request(data["method"], data.get("params"), opts)
    return dict(raw)


# -- 2 and 3. the streamable-HTTP session manager ----------------------------------------------


class GatewaySessionManager(StreamableHTTPSessionManager):
    """The SDK's streamable-HTTP session manager with two additions the front door needs:
    every admitted session gets its own event store from ``event_store_factory`` (never one
    shared across sessions), and :meth:`standalone_stream_open` tells whether a session's GET
    stream is open. Everything else is the SDK's own behaviour, unchanged."""

    def __init__(self, app: Any, *, event_store_factory: Callable[[], EventStore] | None = None, **kwargs: Any) -> None:
        if event_store_factory is not None and kwargs.get("event_store") is not None:
            raise ValueError("pass event_store or event_store_factory, not both")
        super().__init__(app, **kwargs)
        self._event_store_factory = event_store_factory

    def _admit_session(self, requestor: Any) -> StreamableHTTPServerTransport | None:
        # SDK private hook: runs under the manager's session-creation lock, before the new
        # transport serves its first request, so the store is in place for its first event.
        transport = super()._admit_session(requestor)
        if transport is not None and self._event_store_factory is not None:
            if not hasattr(transport, "_event_store"):
                raise SDKChangedError("StreamableHTTPServerTransport._event_store")
            transport._event_store = self._event_store_factory()
        return transport

    def transport(self, http_session_id: str) -> StreamableHTTPServerTransport | None:
        """The live transport of an HTTP session, or ``None`` once the session is gone."""
        try:
            instances: dict[str, StreamableHTTPServerTransport] = self._server_instances
        except AttributeError:
            raise SDKChangedError("StreamableHTTPSessionManager._server_instances") from None
        return instances.get(http_session_id)

    def standalone_stream_open(self, http_session_id: str) -> bool | None:
        """Whether the session's standalone GET stream (where pushes ride) is open right now;
        ``None`` when the session no longer exists."""
        transport = self.transport(http_session_id)
        if transport is None:
            return None
        try:
            streams = transport._request_streams
        except AttributeError:
            raise SDKChangedError("StreamableHTTPServerTransport._request_streams") from None
        return GET_STREAM_KEY in streams


# -- 4. an HTTP client with the SDK's transport defaults ---------------------------------------


def mcp_http_client(headers: dict[str, str] | None = None, auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` configured as the SDK's streamable-HTTP transport configures its
    own, sending ``headers`` on every request (and authenticating with ``auth``, if given). Use it
    as an async context manager."""
    return create_mcp_http_client(headers=headers, auth=auth)
