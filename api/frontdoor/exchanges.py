"""Held exchanges: a 2026-07-28 client (SEP-2322: no server→client requests — its call is
answered with an ``InputRequiredResult`` and it retries with the answers and the echoed
``request_state``) calling through a 2025-era upstream that sends real requests mid-call.

This module holds the *held exchanges* (:class:`Exchanges`); sealed upstream states are in
``rounds``. A 2025-era upstream sends real server→client requests while the call is in flight,
so the call runs in a task the front door owns (it must outlive the downstream request): the
upstream's requests are handed to the client in an ``InputRequiredResult`` (``request_state``
= ``gw1.h.<unguessable id>``) while the upstream request stays held, pinned to its revision;
the retry's answers complete the held requests, and the client gets either the next round or
the upstream's result. A ``request_state`` presented by another session, or for another name,
is ``invalid_request_state`` (-32031).

Bounds (I18): at most :data:`PARKED_PER_SESSION` held exchanges of one session, and
:data:`PARKED_MAX` in all, wait for a retry at a time — past them the upstream's request is
refused (the call itself goes on); a parked exchange waits :data:`EXCHANGE_TTL_S` for the
retry, then its upstream call is cancelled. Cancelling a waiting downstream request (the client
went away) cancels the held upstream call. Everything the front door holds for an exchange is
released when it settles."""

from __future__ import annotations

import itertools
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server import ServerRequestContext

from mcp_reconciler.api.frontdoor.relay import INVALID_REQUEST_STATE, Relay, RelayError
from mcp_reconciler.api.frontdoor.rounds import HELD_PREFIX, invalid_state
from mcp_reconciler.api.frontdoor.sessions import Binding
from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.model import EntryKind
from mcp_reconciler.reconciler.peer import PeerAnswer, request_kind
from mcp_reconciler.reconciler.runtime import LiveGeneration
from mcp_reconciler.reconciler.upstream import UpstreamConnection

log = logging.getLogger("mcp_reconciler.frontdoor")
_exchanges = telemetry.meter.create_counter(
    "frontdoor.relay.exchanges", description="Held exchanges with 2026-era clients, by outcome"
)

EXCHANGE_TTL_S = 120.0  # a parked exchange waits this long for the client's retry
PARKED_PER_SESSION = 16
PARKED_MAX = 1024


@dataclass(eq=False)
class _Ask:
    request: types.InputRequest
    answered: anyio.Event = field(default_factory=anyio.Event)
    answer: PeerAnswer | types.ErrorData | None = None

    def settle(self, answer: PeerAnswer | types.ErrorData) -> None:
        if not self.answered.is_set():
            self.answer = answer
            self.answered.set()


_keys = itertools.count(1)


@dataclass(eq=False)
class Exchange:
    """One call of a 2026-era client on a 2025-era upstream, run by the front door's task.

    ``ctx`` is the downstream request currently waiting on it (the first call or a retry), or
    ``None`` while it is parked; the relay sends log records and progress there."""

    session_id: str
    kind: EntryKind
    name: str
    revision: int
    drifted: bool
    ttl_s: float
    capabilities: types.ClientCapabilities | None = None  # what the client declared on its first call
    id: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    ctx: ServerRequestContext[Any] | None = None
    scope: anyio.CancelScope | None = None
    outcome: tuple[bool, Any] | None = None
    claimed: anyio.Event = field(default_factory=anyio.Event)
    asked: dict[str, _Ask] = field(default_factory=dict)
    unsent: list[str] = field(default_factory=list)
    sent: set[str] = field(default_factory=set)
    changed: anyio.Event = field(default_factory=anyio.Event)

    @property
    def token(self) -> str:
        """The ``requestState`` a client echoes to resume this held call (the held-call prefix plus its id)."""
        return HELD_PREFIX + self.id

    def signal(self) -> None:
        """Wake the request waiting on this exchange (a new upstream request or the outcome arrived)."""
        self.changed.set()

    def cancel(self) -> None:
        """Cancel the held upstream call (its upstream requests are answered with errors)."""
        if self.scope is not None:
            self.scope.cancel()
        for ask in self.asked.values():
            ask.settle(
                types.ErrorData(
                    code=types.INVALID_REQUEST, message="the call was cancelled", data={"code": "call_ended"}
                )
            )

    def finish(self, ok: bool, value: Any) -> None:
        """Record the held call's outcome (``ok``: result, else the exception) and wake the waiter; only
        the first outcome counts."""
        if self.outcome is None:
            self.outcome = (ok, value)
            self.signal()

    async def ask(self, request: types.InputRequest) -> PeerAnswer | types.ErrorData:
        """Called for a server→client request of the held call: hand it to the client in the
        next ``InputRequiredResult`` and wait (at most the TTL) for the retry's answer."""
        key = f"{request_kind(request)}-{next(_keys)}"
        ask = self.asked[key] = _Ask(request)
        self.unsent.append(key)
        self.signal()
        try:
            with anyio.move_on_after(self.ttl_s):
                await ask.answered.wait()
            if ask.answer is None:
                log.info("held exchange expired waiting for a client's retry (%s %s)", self.kind.value, self.name)
                _exchanges.add(1, {"outcome": "expired"})
                self.cancel()
                return types.ErrorData(
                    code=types.INVALID_REQUEST,
                    message="the client did not answer in time",
                    data={"code": "input_timeout"},
                )
            return ask.answer
        finally:
            self.asked.pop(key, None)
            self.sent.discard(key)

    def answer(self, responses: types.InputResponses) -> None:
        """Deliver a retry's answers; a request sent but not answered is asked again."""
        for key in list(self.sent):
            ask = self.asked.get(key)
            response = responses.get(key)
            if ask is not None and response is not None:
                ask.settle(response)
                self.sent.discard(key)
            elif ask is not None and key not in self.unsent:
                self.unsent.append(key)
                self.sent.discard(key)


class Exchanges:
    """Held exchanges (module docstring). Run :meth:`run` in the front door's task group; every
    exchange's task is a child of it, so none outlives the front door."""

    def __init__(
        self,
        relay: Relay,
        *,
        deadline_s: float,
        ttl_s: float = EXCHANGE_TTL_S,
        parked_per_session: int = PARKED_PER_SESSION,
        parked_max: int = PARKED_MAX,
    ) -> None:
        self._relay = relay
        self._deadline_s = deadline_s
        self._ttl_s = ttl_s
        self._per_session = parked_per_session
        self._max = parked_max
        self._parked: dict[str, Exchange] = {}
        self._tg: TaskGroup | None = None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the exchanges' tasks until cancelled (then every held upstream call is cancelled)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                self._tg = None

    def parked(self, session_id: str | None = None) -> int:
        """How many exchanges wait for a retry (of one session, or in all)."""
        if session_id is None:
            return len(self._parked)
        return sum(1 for ex in self._parked.values() if ex.session_id == session_id)

    async def start(
        self,
        binding: Binding,
        ctx: ServerRequestContext[Any],
        conn: UpstreamConnection,
        live: LiveGeneration,
        request: Any,
        result_type: Any,
        *,
        kind: EntryKind,
        name: str,
        drifted: bool,
        timeout_s: float | None,
    ) -> Any:
        """Run one call as an exchange and answer its first round: the upstream's result, or an
        ``InputRequiredResult`` when the upstream asked for input first."""
        if self._tg is None:
            raise RuntimeError("the front door's exchange task group is not running")
        ex = Exchange(
            binding.session.id, kind, name, live.revision, drifted, self._ttl_s, ctx.session.client_capabilities
        )
        started = anyio.Event()
        self._tg.start_soon(self._run, ex, binding, conn, live, request, result_type, timeout_s, started)
        await started.wait()
        return await self._round(ex, ctx)

    async def resume(
        self,
        binding: Binding,
        ctx: ServerRequestContext[Any],
        kind: EntryKind,
        name: str,
        state: str,
        responses: types.InputResponses | None,
    ) -> tuple[Any, Exchange]:
        """A client's retry with a held ``request_state``: deliver its answers, answer the next round."""
        ex = self._parked.get(state.removeprefix(HELD_PREFIX))
        if ex is None or ex.session_id != binding.session.id or ex.kind is not kind or ex.name != name:
            raise invalid_state()
        if ex.ctx is not None:
            raise RelayError(
                INVALID_REQUEST_STATE,
                "this request_state is already being retried",
                {"code": "invalid_request_state", "retryable": True},
            )
        ex.answer(responses or {})
        return await self._round(ex, ctx), ex

    async def _round(self, ex: Exchange, ctx: ServerRequestContext[Any]) -> Any:
        ex.ctx = ctx
        returned = False
        try:
            while True:
                if ex.outcome is not None:
                    ex.claimed.set()
                    self._parked.pop(ex.id, None)
                    ok, value = ex.outcome
                    returned = True
                    if ok:
                        return value
                    raise value
                if ex.unsent:
                    await anyio.lowlevel.checkpoint()  # requests sent together go out together
                    if self._admit(ex):
                        batch = {key: ex.asked[key].request for key in ex.unsent if key in ex.asked}
                        ex.sent.update(batch)
                        ex.unsent.clear()
                        if batch:
                            _exchanges.add(1, {"outcome": "parked"})
                            returned = True
                            return types.InputRequiredResult(input_requests=batch, request_state=ex.token)
                    continue
                ex.changed = anyio.Event()
                await ex.changed.wait()
        finally:
            ex.ctx = None
            if not returned:  # the client gave up on this request (cancelled): the call ends
                ex.cancel()
                self._parked.pop(ex.id, None)

    def _admit(self, ex: Exchange) -> bool:
        """Park ``ex`` for a retry, within the bounds; past them, refuse its pending requests."""
        if ex.id in self._parked or (len(self._parked) < self._max and self.parked(ex.session_id) < self._per_session):
            self._parked[ex.id] = ex
            return True
        _exchanges.add(1, {"outcome": "refused"})
        for key in ex.unsent:
            ask = ex.asked.get(key)
            if ask is not None:
                ask.settle(
                    types.ErrorData(
                        code=types.INVALID_REQUEST,
                        message="too many calls of this session are waiting for input; retry later",
                        data={"code": "too_many_exchanges", "retryable": True},
                    )
                )
        ex.unsent.clear()
        return False

    async def _run(
        self,
        ex: Exchange,
        binding: Binding,
        conn: UpstreamConnection,
        live: LiveGeneration,
        request: Any,
        result_type: Any,
        timeout_s: float | None,
        started: anyio.Event,
    ) -> None:
        async def progress(progress: float, total: float | None, message: str | None) -> None:
            ctx = ex.ctx
            if ctx is not None:
                await ctx.session.report_progress(progress, total, message)

        try:
            with anyio.CancelScope() as scope:
                ex.scope = scope
                started.set()
                try:
                    async with live.operation(deadline_s=self._deadline_s):
                        with self._relay.call(binding, None, conn, exchange=ex) as call:
                            result = await conn.send(
                                request, result_type, timeout_s=timeout_s, progress_callback=progress
                            )
                            await call.settle()
                    ex.finish(True, result)
                except Exception as exc:
                    ex.finish(False, exc)
            if ex.outcome is not None and ex.id in self._parked and not ex.claimed.is_set():
                with anyio.move_on_after(self._ttl_s):  # a result the client has not come back for
                    await ex.claimed.wait()
        finally:
            started.set()
            ex.finish(
                False,
                RelayError(
                    types.INTERNAL_ERROR,
                    "the call ended before it completed",
                    {"code": "call_ended", "retryable": True},
                ),
            )
            self._parked.pop(ex.id, None)
