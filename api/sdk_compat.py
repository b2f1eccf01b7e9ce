"""Every use of an MCP SDK server-side private left in the front door, in one place (written
against ``mcp`` 2.3; pyproject pins <2.4). Issue 26 deletes this module: the data plane
(``api/plane``) already serves ``/mcp`` on public names only; what remains is how the front
door's operations reach the connection and back-channel behind the context the plane builds.

``tests/unit/test_sdk_compat.py`` builds the SDK objects for real and fails naming the attribute
if an SDK release moves one:

1. **The connection behind a request.** A handler's ``ctx.session`` is a new object per
   request; the per-connection ``Connection`` (its ``session_id``, scratch ``state``,
   ``exit_stack`` that unwinds on DELETE/EOF/idle timeout, and the ``send_*_list_changed``
   pushes) is only reachable as ``ServerSession._connection``. The front door touches it only
   through the functions below so that one module knows how a connection is found, keyed,
   watched and pushed to.
4. **An HTTP client with the MCP transports' defaults** (30 s connect/write/pool, 300 s read for
   held-open streams) for clients that must add headers: ``mcp.shared._httpx_utils`` is a
   private module. :func:`mcp_http_client` is used by the SDK's pinned runs and by tests.
5. **A server→client request under an id the gateway chooses, on a request's own stream.** The
   relay sends the request with a ``request_id`` it minted (``CallOptions``) on the request's
   back-channel — ``ServerSession._request_outbound``, reached by :func:`request_channel` — and
   repeats a cancellation on the session's standalone channel.
12. **A listen stream's writer** (``api/frontdoor/listen.py``): the plane's ``FrameChannel``
   (the request's back-channel, as in 5.) has a ``sink`` of SSE frames; :func:`listen_sink`
   returns it, ``None`` on transports without one (stdio).

(Items 2, 3, 9, 10, 11 and 13 — the SDK's session manager, its event stores, the OpenTelemetry
middleware gate, the result serializer, the directly written GET and request streams — went
with the SDK-based HTTP plane, ADR 0035.)"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

import httpx2
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server import ServerRequestContext
from mcp.server.connection import Connection
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.dispatcher import CallOptions, Outbound

from mcp_reconciler.reconciler.model import EntryKind
from mcp_reconciler.reconciler.sdk_client import TESTED_SDK, SDKChangedError

__all__ = ["TESTED_SDK", "SDKChangedError"]  # re-exported: one error for every SDK private


#: Key under which a connection without a transport session id (stdio, in-memory) keeps the
#: front door's binding key in its per-connection scratch ``state``.
_STATE_KEY = "gw.key"


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


def request_channel(ctx: ServerRequestContext[Any]) -> Outbound:
    """The back-channel of the request ``ctx`` serves (``ServerSession._request_outbound``): a
    server→client request sent on it rides that request's own stream."""
    try:
        channel: Outbound = ctx.session._request_outbound
    except AttributeError:
        raise SDKChangedError("ServerSession._request_outbound") from None
    return channel


def listen_sink(ctx: ServerRequestContext[Any]) -> MemoryObjectSendStream[bytes] | None:
    """The byte stream the SDK's writer loop turns into ``ctx``'s SSE response (item 12), or
    ``None`` when the request's transport has none (stdio, JSON-response mode)."""
    sink = getattr(request_channel(ctx), "sink", None)
    return sink if isinstance(sink, MemoryObjectSendStream) else None


async def push_cancelled(conn: Connection, request_id: str, reason: str) -> None:
    """Push ``notifications/cancelled`` for our request ``request_id`` on ``conn``'s standalone
    channel (where it arrives even after the request's own stream closed)."""
    await conn.notify("notifications/cancelled", {"requestId": request_id, "reason": reason})


async def push_log(conn: Connection, params: types.LoggingMessageNotificationParams) -> None:
    """Push one ``notifications/message`` on ``conn``'s standalone channel (legacy only; best
    effort like every push)."""
    await conn.notify("notifications/message", params.model_dump(by_alias=True, mode="json", exclude_none=True))


async def push_elicitation_complete(conn: Connection, elicitation_id: str) -> None:
    """Push ``notifications/elicitation/complete`` for ``elicitation_id`` on ``conn``."""
    await conn.notify("notifications/elicitation/complete", {"elicitationId": elicitation_id})


async def push_resource_updated(conn: Connection, uri: str) -> None:
    """Push ``notifications/resources/updated`` for ``uri`` on ``conn`` (best effort, like
    :func:`push_list_changed`)."""
    await conn.send_resource_updated(uri)


async def ask_client(
    ctx: ServerRequestContext[Any], method: str, params: dict[str, Any] | None, opts: CallOptions
) -> dict[str, Any]:
    """Ask the client of the request ``ctx`` serves ``method`` on that request's own stream
    (its back-channel, item 5), under ``opts["request_id"]``, and return its raw result
    (``MCPError`` for its error)."""
    return dict(await request_channel(ctx).send_raw_request(method, params, opts))


# -- 4. an HTTP client with the SDK's transport defaults ---------------------------------------


def mcp_http_client(headers: dict[str, str] | None = None, auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` configured as the SDK's streamable-HTTP transport configures its
    own, sending ``headers`` on every request (and authenticating with ``auth``, if given). Use it
    as an async context manager."""
    return create_mcp_http_client(headers=headers, auth=auth)
