"""Many replicas, one truth: sessions, grants, holds and revisions shared through a cluster store
(ADR 0020). ``store.py`` is the interface and the in-memory store, ``redis_store.py`` the Redis
one, ``sync.py`` one replica's side (cache, writes, event reader, heartbeat, staleness).

Composition (``reconciler/gateway.py``): :func:`open_store` builds the store from the
``cluster:`` config, a :class:`StoreLedger` over it is handed to the reconciler (revision numbers
by content) and :class:`ClusterOptions` to the engine, which runs the
:class:`~mcp_reconciler.reconciler.cluster.sync.ClusterSync`. Without a ``cluster:`` section none
of this exists and the engine behaves as a single process always did."""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field

from mcp_reconciler.reconciler.catalog import Catalog
from mcp_reconciler.reconciler.cluster.store import ClusterStore, MemoryStore, StoreUnavailableError
from mcp_reconciler.reconciler.generation import content_digest

log = logging.getLogger("mcp_reconciler.cluster")

__all__ = [
    "ClusterOptions",
    "ClusterStore",
    "MemoryStore",
    "StoreLedger",
    "content_digest",
    "default_replica_id",
    "open_store",
]


def default_replica_id() -> str:
    """``<host>-<pid>``: unique per process on one machine and across machines."""
    return f"{socket.gethostname()}-{os.getpid()}"


def open_store(url: str, *, prefix: str = "mcpr", command_timeout_s: float = 2.0) -> ClusterStore:
    """The store a ``cluster.store`` value names: ``memory`` or a Redis URL (redis-py is
    imported only then)."""
    if url == "memory":
        return MemoryStore()
    from mcp_reconciler.reconciler.cluster.redis_store import RedisStore

    return RedisStore(url, prefix=prefix, command_timeout_s=command_timeout_s)


class StoreLedger:
    """The reconciler's revision-ledger hook over a store (``reconcile.RevisionLedger``): the
    cluster-wide number for a content digest, or ``None`` when the store cannot be reached (the
    replica then numbers locally; its status shows ``diverged`` until the ledger agrees)."""

    def __init__(self, store: ClusterStore, replica_id: str) -> None:
        self.store = store
        self.replica_id = replica_id
        #: The newest head this replica saw (its own steps and other replicas' ledger events).
        self.head: tuple[int, str] | None = None

    async def __call__(self, catalog: Catalog, floor: int) -> int | None:
        """The revision for ``catalog`` (see the class docstring)."""
        digest = content_digest(catalog)
        try:
            revision = await self.store.ledger_step(digest, floor=floor, origin=self.replica_id)
        except StoreUnavailableError as exc:
            log.warning("revision ledger unreachable (%s): numbering this publication locally", exc)
            return None
        self.observe(revision, digest)
        return revision

    def observe(self, revision: int, digest: str) -> None:
        """Record a head seen on the event log (never moves back)."""
        if self.head is None or revision >= self.head[0]:
            self.head = (revision, digest)


@dataclass(frozen=True)
class ClusterOptions:
    """What the engine needs to join a cluster: the store (connected by the engine), this
    replica's id, the staleness bound and the ledger the reconciler numbers revisions with."""

    store: ClusterStore
    ledger: StoreLedger
    replica_id: str = field(default_factory=default_replica_id)
    staleness_s: float = 3.0
