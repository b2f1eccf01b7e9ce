"""Answers to a 2025-era HTTP upstream's requests, POSTed without the SDK's transport (issue 11).

While serving a call, a 2025-11-25 server may ask the gateway something — sampling, elicitation,
roots — on the call's response stream; the answer goes up as a POST of its own, which the server
accepts with ``202``. The SDK's streamable-HTTP client sends it from its writer task: the message
crosses a memory stream, a task group is opened for it, an ``httpx2`` request is built, passed
through the client's hooks and pool, and its response closed. That is most of a millisecond of
every relayed round trip (``bench/bench_relay.py``), on the path the relay's target (≤ 2 ms over
direct) is measured on.

:class:`DirectAnswers` wraps the transport's write stream. Answers (responses and errors) and
progress notifications are POSTed by a :class:`~reconciler.fasthttp.JsonRpcPoster` in the
sender's own task, carrying the session headers the SDK's transport last sent
(:class:`SessionHeaders`, an ``httpx2`` request hook). Progress goes the same way because the
relay sends the client's progress up *before* its answer (``api/frontdoor/relay.py``), and a
progress POST still queued in the SDK's writer could be overtaken by an answer sent directly.
Everything else goes to the SDK's transport as before: requests (their responses ride their
own streams), ``notifications/initialized`` (it starts the SDK's GET stream), cancellations,
any message with headers or a resumption token of its own, and every message sent before the
session has an id.

Ordering: messages one task sends are POSTed in order, each after the previous one was
accepted (the SDK's writer gives no stronger order: it hands requests to tasks of their own).

Failure: a POST that breaks, times out (:data:`ANSWER_TIMEOUT_S`) or is refused by the pool is
handed to the SDK's transport, which sends it again its own way — a duplicate answer is ignored
by the server (its request is already settled), a lost one would hang the upstream's tool. A
non-2xx status is the server's word on a message it read; the SDK ignores it for answers and
notifications, and so does this.

Used for every streamable-HTTP source (``reconciler/transports.py``); the poster is the source's
peer's (``reconciler/http_peer.py``), with its OAuth token and TLS."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Self

import anyio
import httpx2
from mcp.shared.message import ClientMessageMetadata, SessionMessage
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCResponse

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.errors import UpstreamUnavailableError
from mcp_reconciler.reconciler.fasthttp import JsonRpcPoster

log = logging.getLogger("mcp_reconciler.upstream")

#: How long one direct POST may take before the message is handed to the SDK's transport (the
#: server accepts an answer before acting on it, so this is a connection that stalled).
ANSWER_TIMEOUT_S = 10.0

_SESSION = "mcp-session-id"
_VERSION = "mcp-protocol-version"

_direct = telemetry.meter.create_counter(
    "upstream.direct_answers", description="Messages POSTed to 2025-era HTTP upstreams without the SDK's transport"
)


class SessionHeaders:
    """The session id and protocol version the SDK's transport last sent (``observe`` is an
    ``httpx2`` request hook on its client). The session is *established* at the first POST
    after a successful answer to a POST without a session id (``observe_response``, a response
    hook: the initialize answer, which gives the id, or none from a stateless server) — the
    SDK's ``notifications/initialized``, just after the handshake."""

    def __init__(self) -> None:
        self._headers: dict[str, str] = {}
        self._opened = False  # the initialize answer was seen
        self._known = False
        self.established = anyio.Event()  # set once the session is known

    async def observe_response(self, response: httpx2.Response) -> None:
        """Note the session a successful POST without a session id opened (the initialize
        answer's ``Mcp-Session-Id``; none from a stateless server)."""
        request = response.request
        if request.method != "POST" or _SESSION in request.headers or not 200 <= response.status_code < 300:
            return
        session = response.headers.get(_SESSION)
        self._headers = {_SESSION: session} if session is not None else {}
        self._opened = True

    async def observe(self, request: httpx2.Request) -> None:
        """Remember the session headers of ``request`` (a POST after the session opened)."""
        if request.method != "POST" or not self._opened:
            return
        session = request.headers.get(_SESSION)
        version = request.headers.get(_VERSION)
        headers = {_SESSION: session} if session is not None else {}
        if version is not None:
            headers[_VERSION] = version
        if headers != self._headers or not self._known:
            self._headers = headers
            self._known = True
            self.established.set()

    @property
    def current(self) -> Mapping[str, str] | None:
        """The headers to send with a direct POST, or ``None`` before the session is known."""
        return self._headers if self._known else None


def _goes_direct(item: SessionMessage) -> bool:
    message = item.message
    if isinstance(message, JSONRPCNotification):
        if message.method != "notifications/progress":
            return False
    elif not isinstance(message, JSONRPCResponse | JSONRPCError):
        return False
    meta = item.metadata
    return not (isinstance(meta, ClientMessageMetadata) and (meta.headers or meta.resumption_token))


class DirectAnswers:
    """The SDK's ``WriteStream`` protocol over the transport's write stream ``inner``: answers
    and progress go out through ``poster`` (see the module docstring), the rest to ``inner``.
    Closing it closes ``inner``; the poster belongs to whoever made it."""

    def __init__(self, inner: Any, poster: JsonRpcPoster, headers: SessionHeaders) -> None:
        self._inner = inner
        self._poster = poster
        self._headers = headers

    @property
    def poster(self) -> JsonRpcPoster:
        """The keep-alive pool answers are POSTed on (the legacy lane's calls use it too)."""
        return self._poster

    @property
    def headers(self) -> SessionHeaders:
        """The session headers the SDK's transport last sent."""
        return self._headers

    async def send(self, item: SessionMessage, /) -> None:
        """Send ``item``: POSTed directly when it qualifies and the session is known, otherwise
        (or when the direct POST fails) through the SDK's transport."""
        headers = self._headers.current
        if headers is not None and _goes_direct(item):
            wire = item.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
            try:
                with anyio.fail_after(ANSWER_TIMEOUT_S):
                    await self._poster.send(wire, headers)
                _direct.add(1)
                return
            except (UpstreamUnavailableError, TimeoutError) as exc:
                log.debug("direct POST failed (%s); the SDK's transport sends it", type(exc).__name__)
        await self._inner.send(item)

    async def aclose(self) -> None:
        """Close the transport's write stream."""
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._inner.__aexit__(*exc)
