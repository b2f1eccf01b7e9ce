"""The engine assembled on a config file: desired state from YAML, real upstream connections,
the reconcile loop, an input watcher and per-source pollers. No HTTP edge here (``api/``).

``async with Gateway(path) as gw:`` loads the config (a config that was never valid fails here,
with file:line), starts everything and performs the first full cycle before returning;
``gw.engine`` is the facade the edges use. Leaving the block stops the watcher, closes every
generation and connection exactly once and stops every upstream process (I14).

Gateway is a composition root: it creates the trigger queue first, gives ``queue.add`` to the
upstream reader and the queue to the reconciler (and one ``PeerSwitch`` to the reader and the
engine, where the front door attaches), and enters the parts on one
``AsyncExitStack`` — nothing is wired by assigning attributes afterwards."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType

from mcp_reconciler.reconciler.authority import DriftPolicy
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.cluster import ClusterOptions, StoreLedger, default_replica_id, open_store
from mcp_reconciler.reconciler.config import GatewaySettings
from mcp_reconciler.reconciler.config_source import ConfigDesiredState
from mcp_reconciler.reconciler.engine import Engine
from mcp_reconciler.reconciler.peer import PeerSwitch
from mcp_reconciler.reconciler.reconcile import Reconciler, new_trigger_queue
from mcp_reconciler.reconciler.upstream import TargetFactory, UpstreamReader, default_targets
from mcp_reconciler.reconciler.workqueue import ALL

log = logging.getLogger("mcp_reconciler.gateway")


class Gateway:
    """An engine on a config file (see the module docstring). ``engine`` is the facade for
    edges; ``rec`` and ``reader`` are the parts, for tests and benchmarks that observe them."""

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
        self._exit = AsyncExitStack()
        self._engine: Engine | None = None
        self._rec: Reconciler | None = None
        self._reader: UpstreamReader | None = None

    async def __aenter__(self) -> Gateway:
        await self.desired.load()  # a config that was never valid fails here, with file:line
        settings = self.desired.settings
        bounds = self._bounds_override or (settings.bounds() if settings is not None else Bounds())
        queue = new_trigger_queue(bounds)
        peer = PeerSwitch()
        cluster = self._cluster_options()
        async with AsyncExitStack() as stack:
            self._reader = await stack.enter_async_context(
                UpstreamReader(
                    self._targets,
                    bounds=bounds,
                    on_dirty=queue.add,
                    health_interval_s=self._health_interval_s,
                    peer=peer,
                )
            )
            self._rec = await stack.enter_async_context(
                Reconciler(
                    self.desired,
                    self._reader,
                    bounds=bounds,
                    queue=queue,
                    ledger=cluster.ledger if cluster is not None else None,
                )
            )
            engine = Engine(
                self._rec,
                reconnects=self._reader,
                inputs=self.desired.poll,
                drift_policy=DriftPolicy(settings.drift_policy if settings is not None else "flag"),
                watch_interval_s=self._watch_interval_s,
                peer=peer,
                cluster=cluster,
            )
            self._engine = await stack.enter_async_context(engine)
            # The first cycle, without an input check first (the config was loaded just now).
            await self._rec.refresh(
                [ALL], timeout_s=self._initial_timeout_s or bounds.cycle_timeout_s + 5, reason="startup"
            )
            self._exit = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._exit.__aexit__(exc_type, exc, tb)

    def _cluster_options(self) -> ClusterOptions | None:
        """The ``cluster:`` section as engine options (``None``: absent, one replica)."""
        loaded = self.desired.last_good
        config = loaded.cluster if loaded is not None else None
        if config is None:
            return None
        store = open_store(config.store, prefix=config.prefix, command_timeout_s=min(2.0, config.staleness_s / 2))
        replica_id = config.replica_id or default_replica_id()
        log.info(
            "cluster: replica %s on a %s store (staleness bound %.1f s)", replica_id, store.name, config.staleness_s
        )
        return ClusterOptions(
            store=store, ledger=StoreLedger(store, replica_id), replica_id=replica_id, staleness_s=config.staleness_s
        )

    @property
    def engine(self) -> Engine:
        """The facade the edges use (started)."""
        assert self._engine is not None, "Gateway is not started"
        return self._engine

    @property
    def settings(self) -> GatewaySettings | None:
        """The ``gateway:`` settings of the newest valid config."""
        return self.desired.settings

    @property
    def rec(self) -> Reconciler:
        """The reconcile loop (tests and benchmarks; edges use :attr:`engine`)."""
        assert self._rec is not None, "Gateway is not started"
        return self._rec

    @property
    def reader(self) -> UpstreamReader:
        """The upstream reader (tests and benchmarks; edges use :attr:`engine`)."""
        assert self._reader is not None, "Gateway is not started"
        return self._reader
