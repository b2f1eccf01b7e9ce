"""The engine assembled on a config file: desired state from YAML, real upstream connections,
the reconcile loop, an input watcher and per-source pollers. No HTTP edge here (``api/``).

``async with Gateway(path) as gw:`` starts everything and performs the first full cycle before
returning; leaving the block stops the watcher, closes every generation and connection exactly
once and stops every upstream process (I14)."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.config_source import ConfigDesiredState
from mcp_reconciler.reconciler.reconcile import CycleOutcome, Reconciler
from mcp_reconciler.reconciler.status import status
from mcp_reconciler.reconciler.upstream import TargetFactory, UpstreamReader, default_targets
from mcp_reconciler.reconciler.workqueue import ALL

log = logging.getLogger("mcp_reconciler.gateway")


class Gateway:
    def __init__(
        self,
        config_path: str | Path,
        *,
        watch_interval_s: float = 1.0,
        bounds: Bounds | None = None,
        targets: TargetFactory = default_targets,
        health_interval_s: float | None = 30.0,
        initial_timeout_s: float | None = None,
    ) -> None:
        self.config_path = Path(config_path)
        self.desired = ConfigDesiredState(self.config_path)
        self._watch_interval_s = watch_interval_s
        self._bounds_override = bounds
        self._targets = targets
        self._health_interval_s = health_interval_s
        self._initial_timeout_s = initial_timeout_s
        self._tg: TaskGroup | None = None
        self.reader: UpstreamReader | None = None
        self.reconciler: Reconciler | None = None

    async def __aenter__(self) -> Gateway:
        await self.desired.load()  # a config that was never valid fails here, with file:line
        settings = self.desired.settings
        bounds = self._bounds_override or (settings.bounds() if settings is not None else Bounds())
        self.reader = UpstreamReader(self._targets, bounds=bounds, health_interval_s=self._health_interval_s)
        await self.reader.__aenter__()
        try:
            self.reconciler = Reconciler(self.desired, self.reader, bounds=bounds)
            self.reader.on_dirty = self.reconciler.trigger
            await self.reconciler.__aenter__()
            self._tg = anyio.create_task_group()
            await self._tg.__aenter__()
        except BaseException:
            await self._exit_engine()
            raise
        self._tg.start_soon(self._watch)
        self._tg.start_soon(self._poll_sources)
        await self.reconciler.refresh([ALL], timeout_s=self._initial_timeout_s or bounds.cycle_timeout_s + 5)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
                await self._tg.__aexit__(None, None, None)
                self._tg = None
        finally:
            await self._exit_engine()

    async def _exit_engine(self) -> None:
        # No shield scope around these: each exits its own task group, which must happen in the
        # scope it was entered in; both shield their own teardown internally.
        try:
            if self.reconciler is not None:
                await self.reconciler.__aexit__(None, None, None)
        finally:
            if self.reader is not None:
                await self.reader.__aexit__(None, None, None)

    @property
    def rec(self) -> Reconciler:
        assert self.reconciler is not None, "Gateway is not started"
        return self.reconciler

    async def check_inputs(self) -> set[str]:
        """Stat sweep now; mark changed inputs dirty. Run before status and refresh answers so
        no answer predates a change on disk (I11)."""
        keys = await self.desired.poll()
        for key in keys:
            self.rec.trigger(key)
        return keys

    async def refresh(self, keys: Iterable[str] = (ALL,), *, timeout_s: float | None = 30.0) -> CycleOutcome:
        await self.check_inputs()
        return await self.rec.refresh(keys, timeout_s=timeout_s)

    async def status(self) -> dict[str, Any]:
        changed = await self.check_inputs()
        out = status(self.rec, self.reader)
        if changed:
            # Inputs changed since the served revision was built: say so rather than answer as current.
            out["inputs_changed_since_build"] = sorted(changed)
            out["reconciling"] = True
        return out

    async def _watch(self) -> None:
        while True:
            await anyio.sleep(self._watch_interval_s)
            try:
                await self.check_inputs()
            except Exception:
                log.exception("input watcher sweep failed")

    async def _poll_sources(self) -> None:
        """Optional jittered per-source polling (``poll_seconds``)."""
        due: dict[str, float] = {}
        while True:
            await anyio.sleep(min(1.0, self._watch_interval_s))
            good = self.desired.last_good
            if good is None:
                continue
            now = anyio.current_time()
            for spec in good.specs:
                if not spec.poll_seconds:
                    due.pop(spec.name, None)
                    continue
                nxt = due.get(spec.name)
                if nxt is None:
                    due[spec.name] = now + spec.poll_seconds * (0.8 + 0.4 * random.random())
                elif now >= nxt:
                    self.rec.trigger(spec.name)
                    due[spec.name] = now + spec.poll_seconds * (0.8 + 0.4 * random.random())
