"""In-process replicas for the cluster tests: each has its own runtime, authority, holds and
:class:`ClusterSync`, and all share one store (one ``MemoryStore`` object, or one Redis server
through separate clients). Publication goes through the store's ledger like the reconciler's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from mcp_reconciler.reconciler.authority import Authority
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.catalog import Catalog
from mcp_reconciler.reconciler.cluster import StoreLedger
from mcp_reconciler.reconciler.cluster.store import ClusterStore
from mcp_reconciler.reconciler.cluster.sync import ClusterSync
from mcp_reconciler.reconciler.holds import HoldRegistry
from mcp_reconciler.reconciler.runtime import PublishResult, Runtime


@dataclass
class Replica:
    name: str
    runtime: Runtime
    authority: Authority
    holds: HoldRegistry
    sync: ClusterSync
    ledger: StoreLedger
    changed: list[int] = field(default_factory=lambda: [0])
    refreshes: list[int] = field(default_factory=lambda: [0])

    async def publish(self, catalog: Catalog) -> PublishResult:
        current = self.runtime.current
        revision = None
        if current is None or current.generation.digest != catalog.digest:
            revision = await self.ledger(catalog, self.runtime.last_assigned_revision)
        return self.runtime.publish(catalog, revision=revision)

    async def until(self, predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Wait (event-driven: woken by every event this replica applies) until ``predicate``."""
        with anyio.fail_after(timeout_s):
            while not predicate():
                applied = self.sync.applied
                with anyio.move_on_after(0.05):  # predicates on local state change without events too
                    await applied.wait()


@contextlib.asynccontextmanager
async def replica(
    name: str, store: ClusterStore, *, staleness_s: float = 1.0, bounds: Bounds | None = None
) -> AsyncIterator[Replica]:
    bounds = bounds or Bounds()
    async with Runtime(bounds) as runtime:
        authority = Authority(bounds)
        holds = HoldRegistry(runtime)
        ledger = StoreLedger(store, name)
        box: list[Replica] = []

        async def refresh() -> Any:
            box[0].refreshes[0] += 1
            return None

        sync = ClusterSync(
            store,
            replica_id=name,
            authority=authority,
            holds=holds,
            runtime=runtime,
            refresh=refresh,
            ledger=ledger,
            staleness_s=staleness_s,
        )
        rep = Replica(name, runtime, authority, holds, sync, ledger)
        box.append(rep)
        authority.on_changed(lambda: rep.changed.__setitem__(0, rep.changed[0] + 1))
        runtime.add_listener(authority.follow)
        async with anyio.create_task_group() as tg:
            await tg.start(holds.run)
            async with sync:
                yield rep
            tg.cancel_scope.cancel()
