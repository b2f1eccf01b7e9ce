"""The gateway's own session with a streamable-HTTP upstream, both eras (issue 25, ADR 0037).

An :class:`HttpSession` is a :class:`~reconciler.jsonrpc_peer.PeerSession` whose wire is the
source's :class:`~reconciler.http_peer.HttpPeer` (ADR 0030): every request — the handshake's
included — is one exchange on the source's keep-alive pool (TLS, OAuth, the resend rule, the
message bound: ``reconciler/fasthttp.py``). What the SDK's streamable-HTTP client did around
those requests is done here:

- **The handshake.** ``server/discover`` or ``initialize`` as the session's ``negotiate`` picks
  them; a 2025-era server's ``Mcp-Session-Id`` is taken from the initialize response's headers
  and sent with every later request, notification and answer (none from a stateless server).
- **The 2025 era's GET stream.** Once initialized, one task holds the session's standalone
  ``GET`` stream open: the server's notifications and requests outside any call arrive there
  (requests answered in tasks of their own, answers POSTed). A stream the server ends is
  resumed with ``Last-Event-ID`` after its ``retry`` delay (else :data:`RESUME_DELAY_S`); a
  server that offers none (``405``) is left alone; :data:`MAX_STREAM_FAILURES` failed attempts
  in a row give up on the stream (the health check decides about the connection).
- **The 2026 era's listen streams** are requests like any other (``subscriptions/listen``,
  answered when the stream closes): their notifications arrive on the request's own stream.
- **The end.** Leaving the session closes the GET stream and, in the 2025 era, ends the
  server's session with ``DELETE`` (best effort, bounded)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import anyio
from anyio.abc import TaskGroup

from mcp_reconciler.reconciler.errors import UpstreamUnavailableError
from mcp_reconciler.reconciler.fasthttp import JsonRpcPoster
from mcp_reconciler.reconciler.http_peer import HttpPeer
from mcp_reconciler.reconciler.jsonrpc_peer import Inbound, OnMessage, PeerSession

log = logging.getLogger("mcp_reconciler.upstream")

_SESSION = "mcp-session-id"
#: Resuming the GET stream: the delay when the server names none, and how many failed
#: attempts in a row end the stream (the SDK's client has the same defaults).
RESUME_DELAY_S = 1.0
MAX_STREAM_FAILURES = 2
#: Ending a 2025-era session with DELETE on close may take this long (best effort).
DELETE_S = 2.0


class HttpSession(PeerSession):
    """One streamable-HTTP source's session (see the module docstring)."""

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
        self._session: dict[str, str] = {}
        self.peer = HttpPeer(poster, self._post_answer, source=source, list_bytes=list_bytes, list_entries=list_entries)
        self._stream_scope = anyio.CancelScope()
        self.streams = 0  # GET streams opened (resumptions included), for status and tests

    @property
    def session_id(self) -> str | None:
        """The server's ``Mcp-Session-Id`` (2025 era; ``None`` from a stateless server)."""
        return self._session.get(_SESSION)

    async def _call(self, message: dict[str, Any], headers: dict[str, str], on_message: OnMessage) -> dict[str, Any]:
        return await self.peer.request(
            message, {**headers, **self._session}, legacy=self.legacy, serve=self._serve, deliver=on_message
        )

    async def _serve(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._inbound.serve(request)

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
        """The 2025 era's standalone GET stream, resumed while the session lasts."""
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
