"""The link between a request and its client, as the front door reaches it: the per-client
``Connection`` behind a request (its key, its HTTP session id, its end, its pushes) and the
request's own back-channel (server→client requests under an id the gateway chose, a listen
stream's frames).

The data plane (``api/plane``) builds every request's context as a :class:`LinkedContext` that
names both — public ``mcp`` names only: the SDK's ``ServerSession`` keeps them private, so the
front door never reads them back from it. The back-channel is anything with the
:class:`BackChannel` shape (the plane's ``Channel``). A context built elsewhere (the SDK's own
server pipeline) has no link: the front door refuses it (``RuntimeError``), it never guesses.

Pushes go through the ``Connection``'s public methods; they are best effort (a connection that is
going away may raise), and the caller decides what a failed push means."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.connection import Connection
from mcp.shared.dispatcher import CallOptions

from mcp_reconciler.reconciler.model import EntryKind

#: Key under which a connection without a transport session id (stdio) keeps the front door's
#: binding key in its per-connection scratch ``state``.
_STATE_KEY = "gw.key"


class BackChannel(Protocol):
    """A request's way back to its client (the plane's ``Channel``)."""

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        """Ask the client ``method`` on the request's stream; its raw result (``MCPError`` for its error)."""
        ...


@dataclass(kw_only=True)
class LinkedContext(ServerRequestContext[Any, Any]):
    """A request context that names its client's ``connection`` and the request's ``channel``."""

    connection: Connection
    channel: BackChannel


def connection_of(ctx: ServerRequestContext[Any]) -> Connection:
    """The per-client connection behind ``ctx``: the same object for every request of one 2025-era
    session (or stdio client), a fresh one per request in the 2026 era."""
    if not isinstance(ctx, LinkedContext):
        raise RuntimeError("a request context without its connection (not built by the data plane)")
    return ctx.connection


def connection_key(conn: Connection) -> str:
    """A stable identity for ``conn``: its HTTP session id, else a key minted once and kept in the
    connection's scratch state (stdio connections have no session id)."""
    key = conn.session_id or conn.state.setdefault(_STATE_KEY, uuid.uuid4().hex)
    return str(key)


def http_session_id(conn: Connection) -> str | None:
    """The 2025-era HTTP session id of ``conn``; ``None`` on stdio."""
    return conn.session_id


def on_connection_close(conn: Connection, callback: Callable[..., object], *args: object) -> None:
    """Run ``callback(*args)`` once when ``conn`` ends (HTTP DELETE, idle timeout, stdio EOF)."""
    conn.exit_stack.callback(callback, *args)


async def ask_client(
    ctx: ServerRequestContext[Any], method: str, params: dict[str, Any] | None, opts: CallOptions
) -> dict[str, Any]:
    """Ask the client of the request ``ctx`` serves ``method`` on that request's own stream, under
    ``opts["request_id"]``, and return its raw result (``MCPError`` for its error)."""
    if not isinstance(ctx, LinkedContext):
        raise RuntimeError("a request context without its back-channel (not built by the data plane)")
    return dict(await ctx.channel.send_raw_request(method, params, opts))


class FrameWriter(Protocol):
    """A listen request's stream as the plane writes it (``api/plane/push.DirectStream``): a
    frame written directly by the publisher when nothing can be ahead of it, else by the
    stream's own task after any write in flight."""

    def takes_direct(self) -> bool:
        """Whether a frame may be written directly now (nothing queued or in flight, open)."""
        ...

    def direct(self, frame: bytes) -> None:
        """Write ``frame`` now from the caller's task, which never waits (a write the transport
        holds finishes on its own)."""
        ...

    async def write(self, frame: bytes) -> None:
        """Write ``frame`` from the stream's own task, after any write in flight."""
        ...


def listen_writer(ctx: ServerRequestContext[Any]) -> FrameWriter | None:
    """The SSE stream of ``ctx``'s response (a listen stream writes there), or ``None`` when the
    request's channel has none (stdio: events go through the session as notifications)."""
    stream = getattr(getattr(ctx, "channel", None), "stream", None)
    if stream is None or not all(callable(getattr(stream, n, None)) for n in ("takes_direct", "direct", "write")):
        return None
    return stream  # type: ignore[no-any-return]


async def push_list_changed(conn: Connection, kinds: Iterable[EntryKind]) -> None:
    """Push one ``list_changed`` per kind group in ``kinds`` on ``conn`` (tools, then resources
    and templates as one, then prompts)."""
    kinds = set(kinds)
    if EntryKind.TOOL in kinds:
        await conn.send_tool_list_changed()
    if kinds & {EntryKind.RESOURCE, EntryKind.RESOURCE_TEMPLATE}:
        await conn.send_resource_list_changed()
    if EntryKind.PROMPT in kinds:
        await conn.send_prompt_list_changed()


async def push_cancelled(conn: Connection, request_id: str, reason: str) -> None:
    """Push ``notifications/cancelled`` for our request ``request_id`` on ``conn``'s standalone
    channel (where it arrives even after the request's own stream closed)."""
    await conn.notify("notifications/cancelled", {"requestId": request_id, "reason": reason})


async def push_log(conn: Connection, params: types.LoggingMessageNotificationParams) -> None:
    """Push one ``notifications/message`` on ``conn``'s standalone channel (2025 era)."""
    await conn.notify("notifications/message", params.model_dump(by_alias=True, mode="json", exclude_none=True))


async def push_elicitation_complete(conn: Connection, elicitation_id: str) -> None:
    """Push ``notifications/elicitation/complete`` for ``elicitation_id`` on ``conn``."""
    await conn.notify("notifications/elicitation/complete", {"elicitationId": elicitation_id})


async def push_resource_updated(conn: Connection, uri: str) -> None:
    """Push ``notifications/resources/updated`` for ``uri`` on ``conn``."""
    await conn.send_resource_updated(uri)
