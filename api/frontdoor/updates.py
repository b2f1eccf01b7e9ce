"""Delivering ``notifications/resources/updated`` to the bindings that subscribed (ADR 0017).

Each binding has an outbox: the exposed URIs it has not been told about yet. A URI already
waiting is not queued twice (updates are level triggers: "read it again"), so an outbox holds at
most the binding's subscriptions, and an upstream flooding updates costs bounded memory. An
outbox with something to deliver sits in one queue, at most once; a fixed pool of
:data:`WORKERS` tasks drains the queue. So one upstream update for N sessions costs N queue
entries and no task per delivery, and a slow client delays only the worker serving it — the
other workers go on with the other bindings.

Per era: a legacy binding is pushed on its connection (on HTTP the data plane's session channel,
``api/plane/era2025.py``) — but only once an HTTP client's GET stream is open (a push before it
would have no stream to ride): until then its outbox is *held* and
retried every :data:`~mcp_reconciler.api.frontdoor.notify.RETRY_S`, like ``list_changed``; a
binding whose session is gone is dropped. A new-era binding is published on its listen bus; each
of its streams delivers the update if it holds the URI."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskStatus
from mcp.server.subscriptions import ResourceUpdated

from mcp_reconciler.api.frontdoor import link
from mcp_reconciler.api.frontdoor.notify import RETRY_S, Notifier
from mcp_reconciler.api.frontdoor.sessions import Binding, Sessions
from mcp_reconciler.reconciler import telemetry

log = logging.getLogger("mcp_reconciler.frontdoor")

WORKERS = 16

_updates = telemetry.meter.create_counter(
    "frontdoor.resource_updates", description="notifications/resources/updated delivered downstream, by era"
)


@dataclass(eq=False)
class _Outbox:
    """The exposed URIs waiting for one binding; ``queued`` while it is in the queue or being
    drained (so it is never in the queue twice)."""

    binding: Binding
    pending: set[str] = field(default_factory=set)
    queued: bool = False
    closed: bool = False


class UpdateDelivery:
    """Outboxes per binding and the worker pool that drains them (module docstring). Run
    :meth:`run` in the owner's task group; :meth:`enqueue` before that only queues."""

    def __init__(self, notifier: Notifier, sessions: Sessions, *, workers: int = WORKERS) -> None:
        self._notifier = notifier
        self._sessions = sessions
        self._workers = workers
        self._outboxes: dict[str, _Outbox] = {}
        self._send, self._receive = anyio.create_memory_object_stream[_Outbox](math.inf)
        self._held: set[_Outbox] = set()
        self._held_wake = anyio.Event()
        self.delivered = 0

    def enqueue(self, binding: Binding, uri: str) -> None:
        """Tell ``binding`` that ``uri`` (exposed) was updated, soon. Never blocks."""
        outbox = self._outboxes.get(binding.key)
        if outbox is None:
            outbox = self._outboxes[binding.key] = _Outbox(binding)
        outbox.pending.add(uri)
        if not outbox.queued:
            outbox.queued = True
            self._send.send_nowait(outbox)

    def close(self, binding_key: str) -> None:
        """The binding holds no subscription any more: forget what it was still to be told."""
        outbox = self._outboxes.pop(binding_key, None)
        if outbox is not None:
            outbox.closed = True
            outbox.pending.clear()
            self._held.discard(outbox)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The workers and the retry of held legacy outboxes, until cancelled."""
        async with anyio.create_task_group() as tg:
            for _ in range(self._workers):
                tg.start_soon(self._worker)
            tg.start_soon(self._retry_held)
            task_status.started()

    async def _worker(self) -> None:
        async for outbox in self._receive:
            try:
                await self._drain(outbox)
            except Exception:  # a worker must outlive one bad delivery
                log.exception("resource update delivery failed")
            finally:
                if outbox not in self._held:
                    outbox.queued = False
                    if outbox.pending and not outbox.closed:  # more arrived after the drain ended
                        outbox.queued = True
                        self._send.send_nowait(outbox)

    async def _drain(self, outbox: _Outbox) -> None:
        binding = outbox.binding
        while outbox.pending and not outbox.closed:
            if binding.era == "legacy" and not self._notifier.can_push(binding):
                if self._sessions.bindings.get(binding.key) is not binding:
                    self.close(binding.key)  # the session is gone: no one left to tell
                    return
                self._held.add(outbox)  # retried once the client's GET stream is open
                self._held_wake.set()
                return
            uri = outbox.pending.pop()
            try:
                if binding.era == "legacy":
                    if binding.conn is None:
                        continue
                    await link.push_resource_updated(binding.conn, uri)
                elif not await self._notifier.publish(binding.key, ResourceUpdated(uri=uri)):
                    continue
            except Exception:
                log.info("session %s: resources/updated push failed", binding.session.id)
                continue
            self.delivered += 1
            _updates.add(1, {"era": binding.era})

    async def _retry_held(self) -> None:
        while True:
            await self._held_wake.wait()
            self._held_wake = anyio.Event()
            while self._held:
                await anyio.sleep(RETRY_S)
                held, self._held = self._held, set()
                for outbox in held:
                    if not outbox.closed:
                        self._send.send_nowait(outbox)  # still ``queued``: back in line
