"""The gateway's connection to a streamable-HTTP source: its session and every request's
exchange, both eras (issue 25: ADR 0030, ADR 0037; issue 26: one module on the call path).

A connection to a streamable-HTTP source has one :class:`HttpPeer` (``reconciler/transports.py``
builds it with the transport), a :class:`~reconciler.jsonrpc_peer.PeerSession` whose wire is
the source's :class:`~reconciler.fasthttp.JsonRpcPoster`. Every request the gateway sends that
source — the handshake, list pages, ``tools/call``, ``resources/read``, ``prompts/get``,
``completion/complete``, tasks, pings, ``resources/subscribe``, ``logging/setLevel``, the
2026 era's ``subscriptions/listen`` — leaves through :meth:`HttpPeer._call` (one exchange on the
pool), entered from the session layer's ``request``; there is no other live path and no switch.

Guarantees, whichever era:

1. **One exchange per request, in the caller's task.** The request is POSTed on the source's
   keep-alive pool (``https://``; the source's OAuth token, renewed once on ``401``), stamped by
   the session layer as the SDK's ``send_request`` stamps it, under an id unique on the
   connection.
2. **Messages about the request, in order.** What the server sends on the request's stream
   before the response (progress for the token the session gave it, log records; 2025 era: its
   own requests about the call, answered in tasks of the call's own group, a copy of the
   caller's context) reaches the session's router in arrival order, awaited in the caller's
   task, before the result.
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
6. **Era and session.** Chosen once by the handshake (``server/discover`` or ``initialize``, as
   the session's ``negotiate`` picks them). A 2025-era server's ``Mcp-Session-Id`` is taken
   from the initialize response's headers and sent with every later request, notification and
   answer (none from a stateless server); its requests are answered on resumable streams
   (``Last-Event-ID``). 2026-07-28 requests are self-contained.
7. **The 2025 era's GET stream.** Once initialized, one task holds the session's standalone
   ``GET`` stream open: the server's notifications and requests outside any call arrive there
   (requests answered in tasks of their own, answers POSTed). A stream the server ends is
   resumed with ``Last-Event-ID`` after its ``retry`` delay (else :data:`RESUME_DELAY_S`); a
   server that offers none (``405``) is left alone; :data:`MAX_STREAM_FAILURES` failed attempts
   in a row give up on the stream (the health check decides about the connection).
8. **The end.** Leaving the session closes the GET stream and, in the 2025 era, ends the
   server's session with ``DELETE`` (best effort, bounded by :data:`DELETE_S`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import anyio
from anyio.abc import TaskGroup

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.errors import UpstreamUnavailableError
from mcp_reconciler.reconciler.fasthttp import JsonRpcPoster
from mcp_reconciler.reconciler.jsonrpc_peer import Inbound, OnMessage, PeerSession
from mcp_reconciler.reconciler.legacy_lane import LegacyLane
from mcp_reconciler.reconciler.peer_contract import ENTRIES_BOUND, LIST_FIELDS, LIST_METHODS

log = logging.getLogger("mcp_reconciler.upstream")

_SESSION = "mcp-session-id"
#: Resuming the GET stream: the delay when the server names none, and how many failed
#: attempts in a row end the stream (the SDK's client has the same defaults).
RESUME_DELAY_S = 1.0
MAX_STREAM_FAILURES = 2
#: Ending a 2025-era session with DELETE on close may take this long (best effort).
DELETE_S = 2.0

_requests = telemetry.Tally("upstream.http_peer.requests", "Requests sent to streamable-HTTP upstreams, by era")
_ERA_2025 = {"era": "2025"}
_ERA_2026 = {"era": "2026"}


class HttpPeer(PeerSession):
    """One streamable-HTTP source's session and requests (see the module docstring):
    ``poster`` is its keep-alive pool; ``list_bytes`` and ``list_entries`` bound the answers
    to list requests."""

    def __init__(
        self,
        poster: JsonRpcPoster,
        inbound: Inbound,
        tg: TaskGroup,
        *,
        source: str,
        list_bytes: int | None = None,
        list_entries: int | None = None,
        on_end: Any = None,
    ) -> None:
        super().__init__(inbound, tg, source=source, on_end=on_end)
        self._poster = poster
        self._lane = LegacyLane(poster, self._post_answer)
        self._session: dict[str, str] = {}
        # A list answer is held to bytes_per_candidate only when that is below the message bound.
        self._list_bound = (
            ("bytes_per_candidate", list_bytes)
            if list_bytes is not None and list_bytes < poster.max_message_bytes
            else None
        )
        self._list_entries = list_entries
        self._stream_scope = anyio.CancelScope()
        self.streams = 0  # GET streams opened (resumptions included), for status and tests

    @property
    def poster(self) -> JsonRpcPoster:
        """The keep-alive pool every request and answer of this source goes through."""
        return self._poster

    @property
    def session_id(self) -> str | None:
        """The server's ``Mcp-Session-Id`` (2025 era; ``None`` from a stateless server)."""
        return self._session.get(_SESSION)

    async def _call(self, message: dict[str, Any], headers: dict[str, str], on_message: OnMessage) -> dict[str, Any]:
        """One request's exchange (guarantees 1 to 5). Raises
        :class:`~reconciler.fasthttp.ResponseError` for a JSON-RPC error,
        :class:`~reconciler.peer_contract.MessageBoundError` at a bound,
        :class:`~reconciler.errors.UpstreamUnavailableError` when the exchange breaks."""
        listing = message["method"] in LIST_METHODS
        bound = self._list_bound if listing else None
        if self._session:
            headers.update(self._session)  # the session's own headers dict: changed in place
        if self.legacy:
            result = await self._lane.call(message, headers, self._inbound.serve, on_message, bound=bound)
            _requests.add(_ERA_2025)
        else:
            result = await self._poster.post(message, headers, on_message, bound=bound)
            _requests.add(_ERA_2026)
        if listing and self._list_entries is not None:
            count = max((len(v) for k in LIST_FIELDS if isinstance(v := result.get(k), list)), default=0)
            if count > self._list_entries:
                raise self._poster.refused((ENTRIES_BOUND, self._list_entries), count)
        return result

    async def _post_answer(self, answer: dict[str, Any]) -> None:
        await self._send(answer, {})

    async def _send(self, message: dict[str, Any], headers: dict[str, str]) -> None:
        await self._poster.send(message, {**headers, **self._session, **self._version()})

    def _version(self) -> dict[str, str]:
        return {"mcp-protocol-version": self.protocol_version} if self.protocol_version else {}

    async def _handshake_call(self, message: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        def session_from(response_headers: Mapping[bytes, bytes]) -> None:
            if message["method"] == "initialize":
                sid = response_headers.get(b"mcp-session-id")
                self._session = {_SESSION: sid.decode("latin-1")} if sid is not None else {}

        return await self._poster.post(message, headers, self.dispatch, on_headers=session_from)

    async def _initialized(self) -> None:
        self._tg.start_soon(self._hold_stream)

    async def _hold_stream(self) -> None:
        """The 2025 era's standalone GET stream, resumed while the session lasts (guarantee 7)."""
        last_id: str | None = None
        failures = 0
        with self._stream_scope:
            while not self.ended:
                retry_s = RESUME_DELAY_S
                try:
                    self.streams += 1
                    end = await self._poster.stream({**self._session, **self._version()}, self.dispatch, last_id)
                except UpstreamUnavailableError as exc:
                    failures += 1
                    log.debug("upstream %s: GET stream broke (%s)", self._source, exc)
                else:
                    if end.status == 405:
                        return  # the server offers no standalone stream
                    if not 200 <= end.status < 300:
                        failures += 1
                    else:
                        failures = 0
                    last_id = end.last_event_id
                    retry_s = end.retry_ms / 1000 if end.retry_ms is not None else RESUME_DELAY_S
                if failures >= MAX_STREAM_FAILURES:
                    log.info("upstream %s: the GET stream could not be resumed; relying on health checks", self._source)
                    return
                await anyio.sleep(retry_s)

    async def close(self) -> None:
        """Stop the GET stream and end a 2025-era server session (best effort, bounded)."""
        self._stream_scope.cancel()
        if self.legacy and self._session:
            with anyio.CancelScope(shield=True), anyio.move_on_after(DELETE_S):
                with contextlib.suppress(UpstreamUnavailableError):
                    await self._poster.delete({**self._session, **self._version()})
