"""Observing the engine from tests: bounded waits on publications, without sleeping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from mcp_reconciler.reconciler.engine import Engine
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.reconcile import Reconciler
from mcp_reconciler.reconciler.runtime import Runtime

#: A hang guard, not a timing: most waits here cover an upstream process starting (the first
#: READY) or starting again; that takes ~1 s on a quiet box and more than 15 s at load 20
#: (tests/integration/conftest.py READY_TIMEOUT_S). Only a failing test ever waits this long.
WAIT = 60.0


def _runtime(target: Any) -> Runtime | Engine:
    if isinstance(target, Runtime | Engine):  # the facade has the same listener/revision API
        return target
    if isinstance(target, Reconciler):
        return target.runtime
    return target.gateway.rec.runtime  # api.server.Served (not imported: the engine suites stay edge-free)


class Publications:
    """Records every publication of a runtime (given a ``Runtime``, an ``Engine``, a
    ``Reconciler`` or a ``Served`` gateway); :meth:`wait_for` waits (bounded, without sleeping) for a generation
    matching a predicate — the current one or a later one."""

    def __init__(self, target: Any) -> None:
        self._runtime = _runtime(target)
        self.generations: list[Generation] = []
        self._event = anyio.Event()
        self._remove = self._runtime.add_listener(self._on_publish)

    def _on_publish(self, new: Generation, _previous: Generation | None) -> None:
        self.generations.append(new)
        event, self._event = self._event, anyio.Event()
        event.set()

    @property
    def revision(self) -> int:
        rev = self._runtime.current_revision
        assert rev is not None
        return rev

    async def wait_for(self, predicate: Callable[[Generation], bool], timeout_s: float = WAIT) -> Generation:
        with anyio.fail_after(timeout_s):
            while True:
                event = self._event
                live = self._runtime.current
                if live is not None and predicate(live.generation):
                    return live.generation
                await event.wait()

    async def wait_above(self, revision: int, timeout_s: float = WAIT) -> Generation:
        return await self.wait_for(lambda g: g.revision > revision, timeout_s)
