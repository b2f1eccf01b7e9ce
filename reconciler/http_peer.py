"""The one path for requests to a streamable-HTTP source, both eras (issue 25, ADR 0030).

A connection to a streamable-HTTP source has one :class:`HttpPeer` (``reconciler/transports.py``
builds it with the transport). Every request the gateway sends that source — list pages,
``tools/call``, ``resources/read``, ``prompts/get``, ``completion/complete``, tasks, pings,
``resources/subscribe``, ``logging/setLevel`` — goes through :meth:`HttpPeer.request`, called
by :meth:`~reconciler.upstream.UpstreamConnection.send_raw`; there is no other live path and no
switch. What stays on the SDK's streamable-HTTP client is the handshake, the 2025 era's standalone
GET stream, and the 2026 era's ``subscriptions/listen`` streams (ADR 0030).

Guarantees, whichever era:

1. **One exchange per request, in the caller's task.** The request is POSTed by the connection's
   :class:`~reconciler.fasthttp.JsonRpcPoster` (keep-alive pool; ``https://``; the source's OAuth
   token, renewed once on ``401``), stamped by the SDK session as ``send_request`` stamps it
   (``reconciler/sdk_client.py``), under an id from a range the SDK's dispatcher never reaches.
   What the server sends on the request's stream before the response — log records, progress,
   2025 era: its own requests about the call — is handled in the caller's task or a task of the
   call's own group (a copy of the caller's context: the relay attributes it to the call).
2. **Progress.** With ``on_progress`` the request carries a progress token (its id, as the
   SDK's dispatcher mints it) and ``notifications/progress`` for that token reach ``on_progress``
   in order, before the result; every other notification reaches ``deliver``.
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
   ``Mcp-Session-Id`` (a stateless server gives none) and are answered on resumable streams
   (``Last-Event-ID``), 2026-07-28 requests are self-contained."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, TypeGuard

import anyio
from mcp.shared.dispatcher import ProgressFnT

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.direct_answers import DirectAnswers
from mcp_reconciler.reconciler.errors import UpstreamUnavailableError
from mcp_reconciler.reconciler.fasthttp import JsonRpcPoster
from mcp_reconciler.reconciler.legacy_lane import Deliver, LegacyLane, ServeRequest
from mcp_reconciler.reconciler.peer_contract import ENTRIES_BOUND, LIST_FIELDS, LIST_METHODS

#: Request ids of the peers: a space of their own, far from the SDK dispatcher's small integers
#: (the handshake and the listen streams still go through it on the same session).
_ids = itertools.count(1 << 40)

#: How long a 2025-era request waits for the session's id after the handshake (the SDK's
#: transport sees it on the initialize response; this only covers a response hook still running).
ESTABLISH_S = 10.0

_requests = telemetry.meter.create_counter(
    "upstream.http_peer.requests", description="Requests sent to streamable-HTTP upstreams, by era"
)


class HttpPeer:
    """One streamable-HTTP source's requests (see the module docstring). ``answers`` holds the
    poster, the session's headers and the way answers to the server's requests go up;
    ``list_bytes`` and ``list_entries`` bound the answers to list requests."""

    def __init__(
        self, answers: DirectAnswers, *, source: str, list_bytes: int | None = None, list_entries: int | None = None
    ) -> None:
        self._answers = answers
        self._lane = LegacyLane(answers)
        self._source = source
        self._list_bytes = list_bytes
        self._list_entries = list_entries

    @property
    def poster(self) -> JsonRpcPoster:
        """The keep-alive pool every request and answer of this source goes through."""
        return self._answers.poster

    def new_id(self) -> int:
        """A request id for this peer (unique in the process)."""
        return next(_ids)

    async def request(
        self,
        message: dict[str, Any],
        headers: Mapping[str, str],
        *,
        legacy: bool,
        serve: ServeRequest,
        deliver: Deliver,
        on_progress: ProgressFnT | None = None,
    ) -> dict[str, Any]:
        """Send the JSON-RPC request ``message`` (stamped; its ``id`` from :meth:`new_id`) with
        ``headers`` and return its raw result. Raises :class:`~reconciler.fasthttp.ResponseError`
        for a JSON-RPC error, :class:`~reconciler.peer_contract.MessageBoundError` at a bound,
        :class:`~reconciler.errors.UpstreamUnavailableError` when the exchange breaks."""
        listing = message["method"] in LIST_METHODS
        bound = None
        if listing and self._list_bytes is not None and self._list_bytes < self.poster.max_message_bytes:
            bound = ("bytes_per_candidate", self._list_bytes)
        route = deliver if on_progress is None else _progress_router(message, on_progress, deliver)
        if legacy:
            if not self._lane.ready:
                try:
                    with anyio.fail_after(ESTABLISH_S):
                        await self._lane.established()
                except TimeoutError:
                    raise UpstreamUnavailableError("the upstream session is not established") from None
            result = await self._lane.call(message, headers, serve, route, bound=bound)
        else:
            result = await self.poster.post(message, headers, route, bound=bound)
        _requests.add(1, {"era": "2025" if legacy else "2026"})
        if listing and self._list_entries is not None:
            count = max((len(v) for k in LIST_FIELDS if isinstance(v := result.get(k), list)), default=0)
            if count > self._list_entries:
                raise self.poster.refused((ENTRIES_BOUND, self._list_entries), count)
        return result


def _progress_router(message: dict[str, Any], on_progress: ProgressFnT, deliver: Deliver) -> Deliver:
    """Give ``message`` a progress token (its id, as the SDK's dispatcher does) and return the
    receiver that hands that token's ``notifications/progress`` to ``on_progress`` and every
    other notification to ``deliver``."""
    token = message["id"]
    params = message.setdefault("params", {})
    params.setdefault("_meta", {})["progressToken"] = token

    async def route(incoming: dict[str, Any]) -> None:
        params = incoming.get("params")
        method = incoming.get("method")
        if method == "notifications/progress" and isinstance(params, dict) and params.get("progressToken") == token:
            progress, total, text = params.get("progress"), params.get("total"), params.get("message")
            if _number(progress):
                await on_progress(
                    float(progress), float(total) if _number(total) else None, text if isinstance(text, str) else None
                )
            return
        await deliver(incoming)

    return route


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
