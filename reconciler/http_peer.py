"""The one path for requests to a streamable-HTTP source, both eras (issue 25, ADR 0030).

A connection to a streamable-HTTP source has one :class:`HttpPeer` (``reconciler/transports.py``
builds it with the transport). Every request the gateway sends that source — list pages,
``tools/call``, ``resources/read``, ``prompts/get``, ``completion/complete``, tasks, pings,
``resources/subscribe``, ``logging/setLevel`` — goes through :meth:`HttpPeer.request`, called
by :meth:`~reconciler.upstream.UpstreamConnection.send_raw`; there is no other live path and no
switch. The session around it — handshake, the 2025 era's GET stream, the 2026 era's
``subscriptions/listen`` streams — is the gateway's own too (``reconciler/http_session.py``,
ADR 0037).

Guarantees, whichever era:

1. **One exchange per request, in the caller's task.** The request is POSTed by the connection's
   :class:`~reconciler.fasthttp.JsonRpcPoster` (keep-alive pool; ``https://``; the source's OAuth
   token, renewed once on ``401``), stamped by the session (``reconciler/jsonrpc_peer.py``) as
   the SDK's ``send_request`` stamps it, under an id unique on the connection.
   What the server sends on the request's stream before the response — log records, progress,
   2025 era: its own requests about the call — is handled in the caller's task or a task of the
   call's own group (a copy of the caller's context: the relay attributes it to the call).
2. **Messages about the request, in order.** What the server sends on the request's stream
   before the response (progress for the token the session gave it, log records) reaches
   ``deliver`` in arrival order, awaited in the caller's task, before the result.
3. **Bounded while reading.** Every message is held to ``limits.upstream_message_bytes``
   (ADR 0025); an answer to a list request to ``bytes_per_candidate`` as well, and a page with
   more entries than ``entries_per_generation`` is refused before any entry is validated — both
   as :class:`~reconciler.peer_contract.MessageBoundError`, which the reader turns into the
   source's diagnostic (last-known-good kept) and stops asking for pages.
4. **The resend rule** (ADR 0019): a request is sent again only when it could not be written
   (a stale pooled connection) or was refused with ``401`` before it ran — never after it was
   written and accepted.
5. **Cancellation.** 2026 era: closing the request's stream (the wire's cancellation); 2025 era:
   the stream closed and ``notifications/cancelled`` sent, within 2 s (``legacy_lane.py``).
6. **Era.** Chosen once by the handshake (``legacy``): 2025-11-25 requests carry the session's
   ``Mcp-Session-Id`` (a stateless server gives none; the caller adds it to ``headers``) and are
   answered on resumable streams (``Last-Event-ID``), 2026-07-28 requests are self-contained."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.fasthttp import JsonRpcPoster
from mcp_reconciler.reconciler.legacy_lane import Deliver, LegacyLane, SendAnswer, ServeRequest
from mcp_reconciler.reconciler.peer_contract import ENTRIES_BOUND, LIST_FIELDS, LIST_METHODS

_requests = telemetry.meter.create_counter(
    "upstream.http_peer.requests", description="Requests sent to streamable-HTTP upstreams, by era"
)


class HttpPeer:
    """One streamable-HTTP source's requests (see the module docstring): ``poster`` is its
    keep-alive pool, ``answer`` sends an answer to one of the server's requests up;
    ``list_bytes`` and ``list_entries`` bound the answers to list requests."""

    def __init__(
        self,
        poster: JsonRpcPoster,
        answer: SendAnswer,
        *,
        source: str,
        list_bytes: int | None = None,
        list_entries: int | None = None,
    ) -> None:
        self._poster = poster
        self._lane = LegacyLane(poster, answer)
        self._source = source
        self._list_bytes = list_bytes
        self._list_entries = list_entries

    @property
    def poster(self) -> JsonRpcPoster:
        """The keep-alive pool every request and answer of this source goes through."""
        return self._poster

    async def request(
        self,
        message: dict[str, Any],
        headers: Mapping[str, str],
        *,
        legacy: bool,
        serve: ServeRequest,
        deliver: Deliver,
    ) -> dict[str, Any]:
        """Send the JSON-RPC request ``message`` (stamped, with its ``id`` and any progress
        token) with ``headers`` and return its raw result; every other message on its stream
        reaches ``deliver`` (2025 era: the server's requests ``serve``). Raises
        :class:`~reconciler.fasthttp.ResponseError` for a JSON-RPC error,
        :class:`~reconciler.peer_contract.MessageBoundError` at a bound,
        :class:`~reconciler.errors.UpstreamUnavailableError` when the exchange breaks."""
        listing = message["method"] in LIST_METHODS
        bound = None
        if listing and self._list_bytes is not None and self._list_bytes < self.poster.max_message_bytes:
            bound = ("bytes_per_candidate", self._list_bytes)
        if legacy:
            result = await self._lane.call(message, headers, serve, deliver, bound=bound)
        else:
            result = await self.poster.post(message, headers, deliver, bound=bound)
        _requests.add(1, {"era": "2025" if legacy else "2026"})
        if listing and self._list_entries is not None:
            count = max((len(v) for k in LIST_FIELDS if isinstance(v := result.get(k), list)), default=0)
            if count > self._list_entries:
                raise self.poster.refused((ENTRIES_BOUND, self._list_entries), count)
        return result
