"""Logging through the gateway: per-session levels, upstream log records relayed to the right
sessions, and each upstream's own level (I17, I18; ADR 0015).

**Levels.** A 2025-11-25 session sets its level with ``logging/setLevel`` (until then it gets
every record, as a direct client of a server that was never asked to filter would). A
2026-07-28 client opts in per request (``_meta["io.modelcontextprotocol/logLevel"]``) and gets
records only for that request, at or above that level.

**Routing.** A record is renamed to ``logger = "<source>"`` or ``"<source>/<upstream logger>"``
and goes where the relay attributes it (``relay``): to the call that produced it — on that
call's request stream, in order, all of it before the call's result — or, when it is tied to no
call, to every 2025-era session that has that source granted (a 2026-era session has no channel
for such records). A record that is *ambiguous* (several calls in flight on a transport that
does not say which) is dropped, never shown to a session that may not have caused it.

**The upstream's own level.** A 2025-era upstream connection (with the ``logging`` capability)
is set to the most verbose level any interested session asked for: after a session's
``setLevel`` (before it is answered) and for new connections after each publication. MCP has no
"unset", so when the sessions that asked go away the last level stays; each session's own
filter still applies. A 2026-era upstream gets the caller's level stamped on each forwarded
request instead (a 2025-era caller that never set one: ``debug``, i.e. everything).

**Bounds (I18).** Per session, a token bucket (:data:`RATE_PER_S`, burst :data:`BURST`) over
every record it is sent; per call, at most :data:`CALL_BACKLOG` records being relayed at once;
per session, a broadcast queue of :data:`QUEUE` records (oldest dropped). A flood costs bounded
memory and is counted (``frontdoor.relay.logs`` by outcome)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, get_args

import anyio
import anyio.lowlevel
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server import ServerRequestContext

from mcp_reconciler.api.frontdoor import link
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.relay import Ambiguous, Call
from mcp_reconciler.api.frontdoor.sessions import Binding, Sessions
from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.authority import Session
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import EntryKind
from mcp_reconciler.reconciler.upstream import UpstreamConnection

log = logging.getLogger("mcp_reconciler.frontdoor")
_records = telemetry.meter.create_counter(
    "frontdoor.relay.logs", description="Upstream log records, by outcome (delivered or why dropped)"
)

LEVELS: Final[tuple[str, ...]] = get_args(types.LoggingLevel)
RATE_PER_S = 100.0  # records per second one session may be sent, sustained
BURST = 200  # ... and at once
CALL_BACKLOG = 256  # records of one call being relayed at once
QUEUE = 256  # records waiting for one session's broadcast pump
LOGGER_MAX = 256  # characters of the renamed logger
SEND_TIMEOUT_S = 5.0  # one push to a slow session
SET_LEVEL_TIMEOUT_S = 5.0  # one upstream logging/setLevel

#: The 2026-era per-request log opt-in key (``mcp_types.LOG_LEVEL_META_KEY``).
LOG_LEVEL_META = types.LOG_LEVEL_META_KEY


def admits(threshold: str | None, level: str) -> bool:
    """Whether a record at ``level`` passes a ``threshold`` (``None``: everything passes)."""
    if threshold is None:
        return True
    try:
        return LEVELS.index(level) >= LEVELS.index(threshold)
    except ValueError:
        return False


def renamed(source: str, params: types.LoggingMessageNotificationParams) -> types.LoggingMessageNotificationParams:
    """``params`` with the source named in ``logger`` (bounded)."""
    logger = source if not params.logger else f"{source}/{params.logger}"
    return types.LoggingMessageNotificationParams(level=params.level, logger=logger[:LOGGER_MAX], data=params.data)


@dataclass
class Bucket:
    """A token bucket: ``take()`` spends one token if there is one. ``clock`` is injectable."""

    rate: float = RATE_PER_S
    burst: float = BURST
    clock: Callable[[], float] = time.monotonic
    tokens: float = float(BURST)
    at: float = field(default=-1.0)

    def take(self) -> bool:
        """Spend one token if one is available (refilled at ``rate`` per second up to ``burst``); O(1)."""
        now = self.clock()
        if self.at >= 0:
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class LogRelay:
    """Per-session log levels and the delivery of upstream log records (module docstring).
    ``can_push(binding)`` says whether a 2025-era session can take a push now (the notifier's
    GET-stream gate). Run :meth:`run` in the front door's task group."""

    def __init__(
        self,
        catalog: CatalogAccess,
        sessions: Sessions,
        *,
        can_push: Callable[[Binding], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._catalog = catalog
        self._sessions = sessions
        self._bindings: Mapping[str, Binding] = sessions.bindings
        self._can_push = can_push
        self._clock = clock
        self._buckets: dict[str, Bucket] = {}
        self._queues: dict[str, deque[types.LoggingMessageNotificationParams]] = {}
        self._sources: dict[str, tuple[Mapping[str, str], int, frozenset[str]]] = {}
        self._applied: dict[str, str] = {}  # connection id → level last set upstream
        self._tg: TaskGroup | None = None
        self._wake = anyio.Event()
        self._unsubscribe = catalog.on_publish(self.touch)

    # -- levels ------------------------------------------------------------------------------

    async def set_level(self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams) -> types.EmptyResult:
        """``logging/setLevel``: this session's threshold; upstream levels follow before it answers."""
        binding = self._sessions.binding(ctx)
        binding.log_level = params.level
        with anyio.move_on_after(SET_LEVEL_TIMEOUT_S):
            await self.apply_upstream_levels()
        return types.EmptyResult()

    def call_level(self, binding: Binding, meta: Mapping[str, Any] | None) -> str | None:
        """The level to stamp on a request forwarded to a 2026-era upstream for ``binding``."""
        if binding.era == "modern":
            wanted = (meta or {}).get(LOG_LEVEL_META)
            return wanted if wanted in LEVELS else None
        return binding.log_level or LEVELS[0]

    async def apply_upstream_levels(self) -> None:
        """Set every current 2025-era connection with the ``logging`` capability to the most
        verbose level its interested sessions asked for, where that changed."""
        live = self._catalog.current()
        if live is None:
            return
        generation = live.generation
        wanted: dict[str, str] = {}
        for binding in list(self._bindings.values()):
            if binding.era != "legacy" or binding.log_level is None:
                continue
            for source in self.granted_sources(binding.session, generation):
                current = wanted.get(source)
                if current is None or LEVELS.index(binding.log_level) < LEVELS.index(current):
                    wanted[source] = binding.log_level
        seen: set[str] = set()
        for source, level in wanted.items():
            state = generation.source_state(source)
            conn = state.connection if state is not None else None
            if not isinstance(conn, UpstreamConnection) or not conn.alive or not conn.legacy:
                continue
            if conn.capabilities is None or conn.capabilities.logging is None:
                continue
            seen.add(conn.connection_id)
            if self._applied.get(conn.connection_id) == level:
                continue
            try:
                request = types.SetLevelRequest(params=types.SetLevelRequestParams(level=level))  # type: ignore[arg-type]
                await conn.send(request, types.EmptyResult, timeout_s=SET_LEVEL_TIMEOUT_S)
                self._applied[conn.connection_id] = level
            except Exception as exc:
                log.info("upstream %s: logging/setLevel failed: %s", conn.source, type(exc).__name__)
        # Forget connections no longer current (their ids are never reused).
        for conn_id in [c for c in self._applied if c not in seen]:
            del self._applied[conn_id]

    def granted_sources(self, session: Session, generation: Generation) -> frozenset[str]:
        """The sources whose names ``session`` has granted in ``generation`` (cached per grant
        set and revision: grant sets are replaced, never mutated)."""
        cached = self._sources.get(session.id)
        if cached is not None and cached[0] is session.grants and cached[1] == generation.revision:
            return cached[2]
        sources: set[str] = set()
        for key in session.grants:
            kind, _, name = key.partition(":")
            entry = generation.routes_for(session.view)[EntryKind(kind)].get(name)
            if entry is not None:
                sources.add(entry.source)
        result = frozenset(sources)
        self._sources[session.id] = (session.grants, generation.revision, result)
        return result

    # -- records -----------------------------------------------------------------------------

    async def deliver(
        self, target: Call | Ambiguous | None, conn: UpstreamConnection, params: types.LoggingMessageNotificationParams
    ) -> None:
        """Relay one upstream record (the relay's ``on_log``; attribution already decided)."""
        if isinstance(target, str):  # AMBIGUOUS
            _records.add(1, {"outcome": "dropped_ambiguous"})
            return
        record = renamed(conn.source, params)
        if target is None:
            self._broadcast(conn.source, record)
            return
        await self._to_call(target, record)

    async def _to_call(self, call: Call, record: types.LoggingMessageNotificationParams) -> None:
        ctx = call.ctx if call.exchange is None else call.exchange.ctx
        if ctx is None or not call.open:
            _records.add(1, {"outcome": "dropped_no_request"})
            return
        binding = call.binding
        threshold = binding.log_level if binding.era == "legacy" else self.call_level(binding, ctx.meta)
        if binding.era == "modern" and threshold is None:
            _records.add(1, {"outcome": "filtered"})
            return  # a 2026 request that did not opt in gets no records
        if not admits(threshold, record.level):
            _records.add(1, {"outcome": "filtered"})
            return
        if call.deliveries >= CALL_BACKLOG or not self._bucket(binding).take():
            _records.add(1, {"outcome": "dropped_rate"})
            return
        call.begin_delivery()  # before any await: the call's result waits for it
        try:
            async with call.lock:  # one at a time per call, in arrival order
                if call.open:
                    with anyio.fail_after(SEND_TIMEOUT_S):
                        await ctx.session.send_notification(
                            types.LoggingMessageNotification(params=record), related_request_id=ctx.request_id
                        )
                    _records.add(1, {"outcome": "delivered"})
        except Exception as exc:
            log.debug("session %s: log relay failed: %s", binding.session.id, type(exc).__name__)
        finally:
            call.end_delivery()

    def _broadcast(self, source: str, record: types.LoggingMessageNotificationParams) -> None:
        live = self._catalog.current()
        if live is None:
            return
        for binding in list(self._bindings.values()):
            if binding.era != "legacy" or binding.conn is None:
                continue
            if not admits(binding.log_level, record.level):
                continue
            if source not in self.granted_sources(binding.session, live.generation):
                continue
            if not self._bucket(binding).take():
                _records.add(1, {"outcome": "dropped_rate"})
                continue
            queue = self._queues.get(binding.key)
            if queue is None:
                if self._tg is None:
                    continue
                queue = self._queues[binding.key] = deque(maxlen=QUEUE)
                self._tg.start_soon(self._pump, binding, queue)
            if len(queue) == QUEUE:
                _records.add(1, {"outcome": "dropped_queue"})
            queue.append(record)

    async def _pump(self, binding: Binding, queue: deque[types.LoggingMessageNotificationParams]) -> None:
        """Push one session's queued records, then end (a new one starts with the next record)."""
        try:
            await anyio.lowlevel.checkpoint()
            while queue and self._bindings.get(binding.key) is binding and binding.conn is not None:
                if not self._can_push(binding):
                    _records.add(len(queue), {"outcome": "dropped_no_stream"})
                    queue.clear()
                    break
                record = queue.popleft()
                try:
                    with anyio.fail_after(SEND_TIMEOUT_S):
                        await link.push_log(binding.conn, record)
                    _records.add(1, {"outcome": "delivered"})
                except Exception:
                    _records.add(len(queue) + 1, {"outcome": "dropped_send_failed"})
                    queue.clear()
        finally:
            if self._queues.get(binding.key) is queue:
                del self._queues[binding.key]

    def _bucket(self, binding: Binding) -> Bucket:
        bucket = self._buckets.get(binding.key)
        if bucket is None:
            bucket = self._buckets[binding.key] = Bucket(clock=self._clock)
        return bucket

    # -- the loop ----------------------------------------------------------------------------

    def touch(self) -> None:
        """Re-apply upstream levels on the loop's next pass (after a publication)."""
        self._wake.set()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Apply upstream levels after each publication and own the broadcast pumps."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                while True:
                    await self._wake.wait()
                    self._wake = anyio.Event()
                    self._prune()
                    with contextlib.suppress(Exception):
                        await self.apply_upstream_levels()
            finally:
                self._tg = None
                self._unsubscribe()

    def _prune(self) -> None:
        """Forget per-session state of sessions that are gone."""
        keys = set(self._bindings)
        for key in [k for k in self._buckets if k not in keys]:
            del self._buckets[key]
        ids = {b.session.id for b in self._bindings.values()}
        for sid in [s for s in self._sources if s not in ids]:
            del self._sources[sid]
