"""Upstream resource subscriptions: one per (source, URI), held on the source's current connection.

Desired state is a reference count per key ``(source, upstream URI)``: how many downstream
subscriptions want it (any number of sessions, across generations). Actual state is what each
upstream connection holds. One loop (:meth:`UpstreamSubscriptions.run`) reconciles the two
whenever either side may have changed — a key gaining its first or losing its last reference, a
publication (a source's connection may have changed: a reconnect, a respawn), a listen stream
that ended — so that:

- every referenced key is held on its source's *current* connection: after a reconnect the new
  connection subscribes again, and updates keep flowing;
- nothing else is held: the last release unsubscribes upstream, and a connection that is no
  longer current (or no longer alive) is let go (best effort while it is still open);
- each connection holds its keys its era's way. 2025-11-25: ``resources/subscribe`` and
  ``resources/unsubscribe`` per URI; updates arrive pushed as ``notifications/resources/updated``
  (:meth:`UpstreamConnection.on_resource_updated`). 2026-07-28: one ``subscriptions/listen``
  stream per connection carrying every held URI (``resource_subscriptions``); a change of the set
  replaces the stream *make-before-break* — the new stream is acknowledged before the old one is
  ended, so no update falls in between — and only the newest stream's events count. A stream
  that ends on its own is opened again (backoff :data:`STREAM_RETRY_MIN_S` → ``_MAX_S``).

Updates reach ``on_update(source, uri)`` only for referenced keys. :meth:`wait_held` lets a
subscriber wait until its key is held (``resources/subscribe`` answers only then, like a direct
server) or learn why it cannot be (the upstream's refusal, or the source being unavailable).

Races: the loop works on a snapshot and a change during a pass marks it dirty, so the next pass
sees it (nothing is lost, passes coalesce). Every upstream request is bounded by
:data:`SUBSCRIBE_TIMEOUT_S`; connections are handled concurrently within a pass, so one slow
upstream delays only its own keys' first hold."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.errors import UpstreamUnavailableError
from mcp_reconciler.reconciler.upstream import UpstreamConnection

log = logging.getLogger("mcp_reconciler.subscriptions")

Key = tuple[str, str]  # (source, upstream URI)

SUBSCRIBE_TIMEOUT_S = 10.0  # one upstream subscribe / unsubscribe / listen acknowledgment
STREAM_RETRY_MIN_S = 0.5
STREAM_RETRY_MAX_S = 30.0

_requests = telemetry.meter.create_counter(
    "upstream.subscriptions", description="Upstream resource subscription requests, by era, action and outcome"
)


def can_subscribe(conn: UpstreamConnection) -> bool:
    """Whether the server behind ``conn`` offers resource subscriptions (``resources.subscribe``)."""
    caps = conn.capabilities
    return bool(caps is not None and caps.resources is not None and caps.resources.subscribe)


class SubscriptionRefusedError(Exception):
    """The upstream did not take the subscription (a 2026-era server left the URI out of the
    listen stream's acknowledged filter)."""


@dataclass(eq=False)
class _Held:
    """What one connection holds. ``uris`` are confirmed held."""

    conn: UpstreamConnection
    uris: set[str] = field(default_factory=set)
    remove_listener: Callable[[], None] | None = None  # 2025-11-25: pushed updates
    stream: anyio.CancelScope | None = None  # 2026-07-28: the current listen stream
    stream_uris: frozenset[str] = frozenset()
    retry_s: float = STREAM_RETRY_MIN_S
    retry_at: float = 0.0  # anyio clock: no new stream before this


class UpstreamSubscriptions:
    """The desired upstream subscriptions and the loop that holds them (module docstring).

    ``connection(source)`` answers the source's current, alive connection (or ``None``);
    ``on_update(source, uri)`` receives updates of referenced keys and must not block."""

    def __init__(
        self,
        connection: Callable[[str], UpstreamConnection | None],
        on_update: Callable[[str, str], None],
    ) -> None:
        self._live_connection = connection
        self._on_update = on_update
        self._refs: dict[Key, int] = {}
        self._held: dict[UpstreamConnection, _Held] = {}
        self._placed: dict[Key, UpstreamConnection] = {}
        self._failures: dict[Key, BaseException] = {}
        self._dirty = True
        self._wake = anyio.Event()
        self._settled = anyio.Event()
        self._tg: TaskGroup | None = None

    # -- desired state -------------------------------------------------------------------------

    def acquire(self, key: Key) -> None:
        """One more reference on ``key``; the first one makes the loop subscribe upstream."""
        n = self._refs.get(key, 0)
        self._refs[key] = n + 1
        if n == 0:
            self._failures.pop(key, None)  # a fresh request: an old refusal is not its answer
            self.touch()

    def release(self, key: Key) -> None:
        """One reference fewer on ``key``; the last one makes the loop unsubscribe upstream."""
        n = self._refs.get(key, 0) - 1
        if n > 0:
            self._refs[key] = n
            return
        self._refs.pop(key, None)
        self._failures.pop(key, None)
        self.touch()

    def refs(self, key: Key) -> int:
        """How many downstream subscriptions reference ``key``."""
        return self._refs.get(key, 0)

    def held_on(self, key: Key) -> UpstreamConnection | None:
        """The connection ``key`` is confirmed held on, if any."""
        return self._placed.get(key)

    def touch(self) -> None:
        """Reconcile again on the loop's next pass (a publication, a reference change)."""
        self._dirty = True
        self._wake.set()

    async def wait_held(self, key: Key, timeout_s: float = SUBSCRIBE_TIMEOUT_S * 2) -> None:
        """Return once ``key`` is held on its source's current connection; raise the reason it
        cannot be (the upstream's error, ``UpstreamUnavailableError``), or ``TimeoutError``."""
        with anyio.fail_after(timeout_s):
            while True:
                failure = self._failures.get(key)
                if failure is not None:
                    raise failure
                conn = self._placed.get(key)
                if conn is not None and conn is self._live_connection(key[0]):
                    return
                await self._settled.wait()

    # -- the loop ------------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Reconcile until cancelled; run it in the owner's task group. Listen streams are held
        by tasks of this loop's own group and end with it."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                while True:
                    retry = self._next_retry()
                    if not self._dirty:
                        with anyio.move_on_after(max(0.0, retry - anyio.current_time())):
                            await self._wake.wait()
                    self._wake = anyio.Event()
                    self._dirty = False
                    await self._sync()
                    settled, self._settled = self._settled, anyio.Event()
                    settled.set()
            finally:
                self._tg = None
                tg.cancel_scope.cancel()

    def _next_retry(self) -> float:
        """When the earliest listen stream that ended on its own may be opened again."""
        now = anyio.current_time()
        lost = [h.retry_at for h in self._held.values() if h.stream is None and h.retry_at > now]
        return min(lost, default=now + 3600)

    async def _sync(self) -> None:
        desired: dict[UpstreamConnection, set[str]] = {}
        for (source, uri), _n in list(self._refs.items()):
            conn = self._live_connection(source)
            if conn is None:
                self._placed.pop((source, uri), None)
                self._failures[(source, uri)] = UpstreamUnavailableError(f"source {source} has no live connection")
                continue
            desired.setdefault(conn, set()).add(uri)
        async with anyio.create_task_group() as tg:
            for conn, held in list(self._held.items()):
                if conn not in desired:
                    del self._held[conn]
                    tg.start_soon(self._let_go, held)
            for conn, uris in desired.items():
                tg.start_soon(self._apply, conn, frozenset(uris))

    async def _apply(self, conn: UpstreamConnection, uris: frozenset[str]) -> None:
        held = self._held.setdefault(conn, _Held(conn))
        if conn.legacy:
            await self._apply_pushed(held, uris)
        else:
            await self._apply_stream(held, uris)
        for uri in uris:
            key = (conn.source, uri)
            if uri in held.uris:
                self._placed[key] = conn
                self._failures.pop(key, None)
            elif self._placed.get(key) is conn:
                del self._placed[key]

    # 2025-11-25: one request per URI, updates pushed ------------------------------------------

    async def _apply_pushed(self, held: _Held, uris: frozenset[str]) -> None:
        conn = held.conn
        if held.remove_listener is None:
            held.remove_listener = conn.on_resource_updated(self._pushed)
        add, drop = uris - held.uris, held.uris - uris

        async def subscribe(uri: str) -> None:
            try:
                await self._request(conn, types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri)))
                held.uris.add(uri)
                _requests.add(1, {"era": "2025", "action": "subscribe", "outcome": "ok"})
            except Exception as exc:
                _requests.add(1, {"era": "2025", "action": "subscribe", "outcome": "error"})
                self._failures[(conn.source, uri)] = exc

        async def unsubscribe(uri: str) -> None:
            held.uris.discard(uri)  # whatever the upstream says: we no longer want it
            await self._unsubscribe(conn, uri)

        async with anyio.create_task_group() as tg:
            for uri in add:
                tg.start_soon(subscribe, uri)
            for uri in drop:
                tg.start_soon(unsubscribe, uri)

    def _pushed(self, conn: UpstreamConnection, uri: str) -> None:
        if conn in self._held and (conn.source, uri) in self._refs:
            self._on_update(conn.source, uri)

    async def _unsubscribe(self, conn: UpstreamConnection, uri: str) -> None:
        if not conn.alive:
            return
        try:
            await self._request(conn, types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri)))
            _requests.add(1, {"era": "2025", "action": "unsubscribe", "outcome": "ok"})
        except Exception as exc:  # best effort: the connection may be going away
            _requests.add(1, {"era": "2025", "action": "unsubscribe", "outcome": "error"})
            log.info("upstream %s: unsubscribe failed: %s", conn.source, type(exc).__name__)

    @staticmethod
    async def _request(conn: UpstreamConnection, request: types.ClientRequest) -> None:
        with anyio.fail_after(SUBSCRIBE_TIMEOUT_S):
            await conn.send(request, types.EmptyResult, timeout_s=SUBSCRIBE_TIMEOUT_S)

    # 2026-07-28: one listen stream per connection ----------------------------------------------

    async def _apply_stream(self, held: _Held, uris: frozenset[str]) -> None:
        if held.stream is not None and held.stream_uris == uris:
            return
        if not uris:
            self._end_stream(held)
            return
        if held.stream is None and anyio.current_time() < held.retry_at:
            return  # a stream that ended on its own: reopened at retry_at
        assert self._tg is not None
        try:
            with anyio.fail_after(SUBSCRIBE_TIMEOUT_S):
                scope, honored = await self._tg.start(self._stream, held, uris)
        except Exception as exc:
            _requests.add(1, {"era": "2026", "action": "listen", "outcome": "error"})
            for uri in uris - held.uris:
                self._failures[(held.conn.source, uri)] = exc
            return
        _requests.add(1, {"era": "2026", "action": "listen", "outcome": "ok"})
        self._end_stream(held)  # the old stream ends only now: make-before-break
        held.stream, held.stream_uris = scope, uris
        held.uris = set(uris & honored)
        for uri in uris - honored:
            self._failures[(held.conn.source, uri)] = SubscriptionRefusedError(uri)

    @staticmethod
    def _end_stream(held: _Held) -> None:
        if held.stream is not None:
            held.stream.cancel()
        held.stream, held.stream_uris, held.uris = None, frozenset(), set()

    async def _stream(
        self, held: _Held, uris: frozenset[str], *, task_status: TaskStatus[tuple[anyio.CancelScope, frozenset[str]]]
    ) -> None:
        conn = held.conn
        started_at = anyio.current_time()
        with anyio.CancelScope() as scope:
            started = False
            try:
                async with conn.listen(resource_subscriptions=sorted(uris)) as sub:
                    honored = frozenset((sub.honored.resource_subscriptions if sub.honored else None) or ())
                    started = True
                    task_status.started((scope, honored))
                    async for method, uri in sub:
                        # Only the newest stream speaks: during a replacement both are open.
                        key = (conn.source, uri) if method == "notifications/resources/updated" and uri else None
                        if key is not None and held.stream is scope and key in self._refs:
                            self._on_update(*key)
            except Exception as exc:
                if not started:
                    raise
                log.info("upstream %s: resource listen stream ended: %s", conn.source, type(exc).__name__)
        if held.stream is scope and not scope.cancel_called:
            # Ended on its own while still wanted: open it again after a backoff (events may
            # have been missed; a level trigger, so a late re-subscribe loses nothing lasting).
            if anyio.current_time() - started_at > STREAM_RETRY_MAX_S:
                held.retry_s = STREAM_RETRY_MIN_S
            held.retry_at = anyio.current_time() + held.retry_s
            held.retry_s = min(held.retry_s * 2, STREAM_RETRY_MAX_S)
            held.stream, held.stream_uris, held.uris = None, frozenset(), set()
            for key in [k for k, c in self._placed.items() if c is conn]:
                del self._placed[key]
            self.touch()

    async def _let_go(self, held: _Held) -> None:
        """A connection no longer current (or nothing wanted on it): drop everything it holds."""
        for key in [k for k, c in self._placed.items() if c is held.conn]:
            del self._placed[key]
        if held.remove_listener is not None:
            held.remove_listener()
        uris = set(held.uris)
        self._end_stream(held)
        if held.conn.legacy:
            async with anyio.create_task_group() as tg:
                for uri in uris:
                    tg.start_soon(self._unsubscribe, held.conn, uri)
