"""Observing the engine from tests: bounded waits on publications, without sleeping."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from api.server import Served
from reconciler.generation import Generation

WAIT = 20.0


class Publications:
    """Waits (bounded, without sleeping) for a published generation matching a predicate."""

    def __init__(self, served: Served) -> None:
        self._runtime = served.gateway.rec.runtime
        self._event = anyio.Event()
        self._remove = self._runtime.add_listener(self._on_publish)

    def _on_publish(self, new: Generation, _previous: Generation | None) -> None:
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
