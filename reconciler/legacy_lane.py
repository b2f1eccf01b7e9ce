"""Requests to a 2025-era HTTP upstream without the SDK's transport: the HTTP peer's 2025 era (issues 11, 25).

The 2026 era's fast lane (``reconciler/fasthttp.py``, ADR 0019) POSTs a call and reads its one
response. A 2025-11-25 call's response stream can carry more: the server's own requests
(sampling, elicitation, roots, ping) about the call, their cancellation, log records and other
notifications, and it may be ended by the server before the response, to be resumed with
``Last-Event-ID``. The SDK's streamable-HTTP client does all of that through its writer task,
memory streams, model validation and its session's dispatcher — about 0.6 ms between a server's
request arriving and the relay seeing it, on the path the relay's target is measured on
(``bench/bench_relay.py``).

:meth:`LegacyLane.call` does the same exchange in its caller's task:

- the request is POSTed by the connection's :class:`~reconciler.fasthttp.JsonRpcPoster` with the
  session's headers (:class:`~reconciler.direct_answers.SessionHeaders`), under a request id
  from a space the SDK's dispatcher never reaches;
- the server's requests on the stream are answered concurrently, each in a task of the call's
  own task group (a copy of the caller's context: the relay attributes them to the call exactly,
  ``api/frontdoor/relay.py``), through the SDK session's own callback table
  (``dispatch_input_request``, so configured roots and the peer switch answer as they do for
  the SDK's transport); the answers go up through
  :class:`~reconciler.direct_answers.DirectAnswers`, which falls back to the SDK's transport;
- the server cancelling one of its requests (``notifications/cancelled``) cancels its task;
  other notifications reach ``deliver`` in order, in the caller's task;
- a stream ended before the response is resumed (``JsonRpcPoster.post(resume=True)``);
- the caller's cancellation (its downstream request cancelled, a timeout) closes the stream
  and tells the server with ``notifications/cancelled``, as the SDK does; requests still being
  answered for the call are cancelled when it ends, whatever ends it.

The 2025 era of every streamable-HTTP source's peer (``reconciler/http_peer.py``, ADR 0030):
every request to such a source takes it, once its session is known; there is no other path."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCResponse

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.direct_answers import DirectAnswers
from mcp_reconciler.reconciler.errors import UpstreamUnavailableError

log = logging.getLogger("mcp_reconciler.upstream")

#: How long telling the server that a cancelled call is cancelled may take (best effort).
CANCEL_NOTICE_S = 2.0

#: Answers one server→client request (its JSON-RPC message) with the wire response or error.
ServeRequest = Callable[[dict[str, Any]], Awaitable[JSONRPCResponse | JSONRPCError]]
#: Receives each notification on the call's stream (in order, awaited).
Deliver = Callable[[dict[str, Any]], Awaitable[None]]

_calls = telemetry.meter.create_counter(
    "upstream.legacy_lane.calls", description="Requests to 2025-era HTTP upstreams sent without the SDK's transport"
)


class LegacyLane:
    """One 2025-era HTTP connection's lane: ``answers`` holds its poster, the session's headers
    and the way answers go up (see the module docstring)."""

    def __init__(self, answers: DirectAnswers) -> None:
        self._answers = answers

    async def established(self) -> None:
        """Wait until the lane is :attr:`ready` (the session's id, or its absence, is known from
        the initialize response, ``direct_answers.SessionHeaders``)."""
        await self._answers.headers.established.wait()

    @property
    def ready(self) -> bool:
        """Whether the session is established (its headers are known)."""
        return self._answers.headers.current is not None

    async def call(
        self,
        message: Mapping[str, Any],
        headers: Mapping[str, str],
        serve: ServeRequest,
        deliver: Deliver,
        *,
        bound: tuple[str, int] | None = None,
    ) -> dict[str, Any]:
        """Send the request ``message`` (its ``id`` unique in the session) with ``headers`` and
        return its result. Raises :class:`~reconciler.fasthttp.ResponseError` for a JSON-RPC
        error, :class:`~reconciler.errors.UpstreamUnavailableError` when the exchange breaks or
        the session is not established. ``bound``: as :meth:`JsonRpcPoster.post`'s."""
        session = self._answers.headers.current
        if session is None:
            raise UpstreamUnavailableError("the upstream session is not established")
        poster = self._answers.poster
        running: dict[Any, anyio.CancelScope] = {}
        async with anyio.create_task_group() as tg:

            async def on_message(incoming: dict[str, Any]) -> None:
                method = incoming.get("method")
                if not isinstance(method, str):
                    return  # a response to something else: not this call's
                if "id" in incoming:
                    scope = running[incoming["id"]] = anyio.CancelScope()
                    tg.start_soon(self._answer, incoming, scope, serve, running)
                elif method == "notifications/cancelled":
                    target = running.get((incoming.get("params") or {}).get("requestId"))
                    if target is not None:
                        target.cancel()
                else:
                    await deliver(incoming)

            failure: Exception | None = None
            try:
                result = await poster.post(message, {**headers, **session}, on_message, resume=True, bound=bound)
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_NOTICE_S):
                    await self._cancelled(message.get("id"), session)
                raise
            except Exception as exc:  # raised after the task group, not wrapped in its group
                failure = exc
            finally:
                tg.cancel_scope.cancel()
        if failure is not None:
            raise failure
        _calls.add(1)
        return result

    async def _answer(
        self, request: dict[str, Any], scope: anyio.CancelScope, serve: ServeRequest, running: dict[Any, Any]
    ) -> None:
        try:
            with scope:
                answer = await serve(request)
                await self._answers.send(SessionMessage(answer))
        except Exception as exc:  # the connection is closing: this request dies with it, not the call
            log.debug("upstream request %r not answered: %s", request.get("method"), type(exc).__name__)
        finally:
            if running.get(request["id"]) is scope:
                del running[request["id"]]

    async def _cancelled(self, request_id: Any, session: Mapping[str, str]) -> None:
        notice = types.CancelledNotification(
            params=types.CancelledNotificationParams(request_id=request_id, reason="cancelled by the gateway's caller")
        ).model_dump(by_alias=True, mode="json", exclude_none=True)
        try:
            await self._answers.poster.send({"jsonrpc": "2.0", **notice}, session)
        except UpstreamUnavailableError:
            log.debug("could not tell the upstream that request %r was cancelled", request_id)
