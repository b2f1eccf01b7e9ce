"""Requests to a 2025-era HTTP upstream: the HTTP peer's 2025 era (issues 11, 25; ADR 0030, ADR 0037).

The 2026 era (``reconciler/fasthttp.py``, ADR 0019) POSTs a call and reads its one response. A
2025-11-25 call's response stream can carry more: the server's own requests (sampling,
elicitation, roots, ping) about the call, their cancellation, log records and other
notifications, and it may be ended by the server before the response, to be resumed with
``Last-Event-ID``.

:meth:`LegacyLane.call` does that exchange in its caller's task:

- the request is POSTed by the connection's :class:`~reconciler.fasthttp.JsonRpcPoster` with the
  session's headers (``Mcp-Session-Id``, from the gateway's own handshake,
  ``reconciler/http_peer.py``);
- the server's requests on the stream are answered concurrently, each in a task of the call's
  own task group (a copy of the caller's context: the relay attributes them to the call exactly,
  ``api/frontdoor/relay.py``), through ``serve`` (the connection's handlers, so configured roots
  and the peer switch answer); the answers go up through ``answer`` (a POST of their own);
- the server cancelling one of its requests (``notifications/cancelled``) cancels its task;
  other notifications reach ``deliver`` in order, in the caller's task;
- a stream ended before the response is resumed (``JsonRpcPoster.post(resume=True)``);
- the caller's cancellation (its downstream request cancelled, a timeout) closes the stream
  and tells the server with ``notifications/cancelled``; requests still being answered for the
  call are cancelled when it ends, whatever ends it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp_types as types

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.errors import UpstreamUnavailableError
from mcp_reconciler.reconciler.fasthttp import JsonRpcPoster

log = logging.getLogger("mcp_reconciler.upstream")

#: How long telling the server that a cancelled call is cancelled may take (best effort).
CANCEL_NOTICE_S = 2.0

#: Answers one server→client request (its JSON-RPC message) with the wire response or error.
ServeRequest = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
#: Sends one answer (a JSON-RPC response or error) up.
SendAnswer = Callable[[dict[str, Any]], Awaitable[None]]
#: Receives each notification on the call's stream (in order, awaited).
Deliver = Callable[[dict[str, Any]], Awaitable[None]]

_calls = telemetry.meter.create_counter("upstream.legacy_lane.calls", description="Requests to 2025-era HTTP upstreams")


class LegacyLane:
    """One 2025-era HTTP connection's lane: requests go through ``poster``, answers to the
    server's requests through ``answer`` (see the module docstring)."""

    def __init__(self, poster: JsonRpcPoster, answer: SendAnswer) -> None:
        self._poster = poster
        self._answer_up = answer

    async def call(
        self,
        message: Mapping[str, Any],
        headers: Mapping[str, str],
        serve: ServeRequest,
        deliver: Deliver,
        *,
        bound: tuple[str, int] | None = None,
    ) -> dict[str, Any]:
        """Send the request ``message`` (its ``id`` unique in the session) with ``headers`` (the
        session's included) and return its result. Raises
        :class:`~reconciler.fasthttp.ResponseError` for a JSON-RPC error,
        :class:`~reconciler.errors.UpstreamUnavailableError` when the exchange breaks.
        ``bound``: as :meth:`JsonRpcPoster.post`'s."""
        poster = self._poster
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
                result = await poster.post(message, headers, on_message, resume=True, bound=bound)
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_NOTICE_S):
                    await self._cancelled(message.get("id"), headers)
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
                await self._answer_up(answer)
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
            await self._poster.send({"jsonrpc": "2.0", **notice}, session)
        except UpstreamUnavailableError:
            log.debug("could not tell the upstream that request %r was cancelled", request_id)
