"""What an upstream connection does with traffic its server starts: server→client requests
(sampling, elicitation, roots) and log records.

The engine cannot answer a server's ``sampling/createMessage`` — only a downstream client can —
and it does not know which client that is. So every :class:`~reconciler.upstream.UpstreamConnection`
hands such traffic to one :class:`PeerSwitch`, created by the composition root *before* the
upstream reader (wiring flows one way, like the trigger queue's ``add``), and the edge that
knows the downstream sessions — the front door — attaches an :class:`UpstreamPeer` to the switch
through the engine facade (:meth:`Engine.attach_peer`), the way it subscribes to publications.

Unattached (an engine with no front door, or after the front door detached), requests are
refused with a clear JSON-RPC error naming what is missing, and log records are dropped: the
upstream is never left waiting on an answer nobody will give.

The switch and the peer run inside the session's tasks (``reconciler/jsonrpc_peer.py``);
contextvars set by the task that sent the upstream request are visible there when the message
arrived on that request's own stream (see ``api/frontdoor/relay.py``). Nothing here imports an HTTP framework."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import mcp_types as types

if TYPE_CHECKING:
    from mcp_reconciler.reconciler.upstream import UpstreamConnection

#: What a server→client request is answered with: the client's result, or an error for the server.
PeerAnswer = types.CreateMessageResult | types.CreateMessageResultWithTools | types.ElicitResult | types.ListRootsResult


class UpstreamPeer(Protocol):
    """The edge's side of an upstream connection's server-initiated traffic."""

    async def on_request(
        self, conn: UpstreamConnection, request: types.InputRequest, request_id: types.RequestId
    ) -> PeerAnswer | types.ErrorData:
        """Answer one server→client request (sampling, elicitation or roots) that arrived on
        ``conn`` under the server's ``request_id``. Cancelling the caller (the server cancelled
        its request, or the connection ended) must cancel whatever the answer waits on."""
        ...

    async def on_log(self, conn: UpstreamConnection, params: types.LoggingMessageNotificationParams) -> None:
        """A ``notifications/message`` from ``conn``'s server. Runs in a notification task of the
        session (stream wires) or in the calling task (a record on an HTTP request's stream);
        either way no read loop waits on it, so it may relay before returning; anything it
        queues must be bounded."""
        ...

    async def on_notification(self, conn: UpstreamConnection, notification: types.ServerNotification) -> None:
        """Any other server notification the edge may relay (e.g. ``notifications/elicitation/
        complete``); same task rules as :meth:`on_log`."""
        ...


def refusal(what: str, source: str = "?") -> types.ErrorData:
    """The error an upstream gets when nobody can answer its ``what`` request."""
    if what == "roots":
        return no_roots(source)
    return types.ErrorData(
        code=types.INVALID_REQUEST,
        message=f"{what} is not available: the gateway has no downstream client to relay it to",
        data={"code": "no_downstream"},
    )


def no_roots(source: str) -> types.ErrorData:
    """The answer to a ``roots/list`` tied to no call, for a source without configured roots."""
    return types.ErrorData(
        code=types.INVALID_REQUEST,
        message=f"roots/list outside a call: no roots are configured for source {source!r}",
        data={"code": "no_roots"},
    )


def request_kind(request: types.InputRequest) -> str:
    """A short name for a server→client request (``sampling``, ``elicitation``, ``roots``)."""
    if isinstance(request, types.CreateMessageRequest):
        return "sampling"
    if isinstance(request, types.ElicitRequest):
        return "elicitation"
    return "roots"


class PeerSwitch:
    """The one indirection between upstream connections and the edge's :class:`UpstreamPeer`.

    Guarantees: at most one peer is attached at a time (attaching a second is an error, so two
    edges can never both answer one request); a request or log arriving while none is attached
    is refused or dropped at once; detaching takes effect for the next message (a request
    already being answered finishes with the peer that took it)."""

    def __init__(self) -> None:
        self._peer: UpstreamPeer | None = None

    @property
    def attached(self) -> bool:
        """Whether an edge is answering server-initiated traffic."""
        return self._peer is not None

    def attach(self, peer: UpstreamPeer) -> Callable[[], None]:
        """Make ``peer`` answer every connection's server-initiated traffic; returns a detacher
        (idempotent). ``RuntimeError`` when another peer is attached."""
        if self._peer is not None:
            raise RuntimeError("an upstream peer is already attached")
        self._peer = peer

        def detach() -> None:
            if self._peer is peer:
                self._peer = None

        return detach

    async def on_request(
        self, conn: UpstreamConnection, request: types.InputRequest, request_id: types.RequestId
    ) -> PeerAnswer | types.ErrorData:
        """Route one server→client request to the attached peer, or refuse it."""
        peer = self._peer
        if peer is None:
            return refusal(request_kind(request), conn.source)
        return await peer.on_request(conn, request, request_id)

    async def on_log(self, conn: UpstreamConnection, params: types.LoggingMessageNotificationParams) -> None:
        """Route one log record to the attached peer, or drop it."""
        peer = self._peer
        if peer is not None:
            await peer.on_log(conn, params)

    async def on_notification(self, conn: UpstreamConnection, notification: types.ServerNotification) -> None:
        """Route another relayable notification to the attached peer, or drop it."""
        peer = self._peer
        if peer is not None:
            await peer.on_notification(conn, notification)
