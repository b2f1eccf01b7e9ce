"""The front door's one window onto the engine.

Every part of the front door reads the catalog through :class:`CatalogAccess`, a thin, read-only
view of the engine facade (:class:`~mcp_reconciler.reconciler.engine.Engine`): the current and
live generations, the operation deadline, publications and readiness — plus revision holds, which
keep a generation (and its connections) open for work that outlives one request (tasks), and the
one hook that lets the front door answer server-initiated upstream traffic
(:meth:`CatalogAccess.attach_peer`). Nothing in the front door reaches into the reconciler or its
runtime."""

from __future__ import annotations

from collections.abc import Callable

from mcp_reconciler.reconciler.approvals import ApprovalRegistry
from mcp_reconciler.reconciler.engine import Engine, Readiness
from mcp_reconciler.reconciler.peer import UpstreamPeer
from mcp_reconciler.reconciler.runtime import LiveGeneration


class CatalogAccess:
    """Read-only access to the engine's live generations for the front door. Every method reads
    the engine's state at call time; none of them blocks or changes it."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def current(self) -> LiveGeneration | None:
        """The current (newest published) generation, or ``None`` before the first publication."""
        return self._engine.current

    def get(self, revision: int) -> LiveGeneration:
        """The live generation with ``revision``; raises the engine's ``RevisionUnavailableError``
        when it is not live (never published, or retired)."""
        return self._engine.get(revision)

    @property
    def closed(self) -> bool:
        """The engine is shutting down: no new operation may start."""
        return self._engine.closed

    @property
    def current_revision(self) -> int | None:
        """The current generation's revision, or ``None`` before the first publication."""
        return self._engine.current_revision

    @property
    def approvals(self) -> ApprovalRegistry:
        """The engine's approval registry (calls parked for an approval, ADR 0034)."""
        return self._engine.approvals

    @property
    def operation_deadline_s(self) -> float:
        """The engine's bound on one forwarded operation (seconds)."""
        return self._engine.bounds.operation_deadline_s

    @property
    def hold_ttl_max_s(self) -> float:
        """The longest a revision hold may last (``Bounds.hold_ttl_max_s``)."""
        return self._engine.holds.max_ttl_s

    def hold(self, revision: int, ttl_s: float, owner: str) -> str:
        """Hold ``revision`` open for ``ttl_s`` seconds (at most :attr:`hold_ttl_max_s`); returns
        the hold id. Raises the engine's hold errors (too many holds, revision not live)."""
        return self._engine.holds.create(revision, ttl_s, owner=owner).id

    def release_hold(self, hold_id: str) -> None:
        """Release a hold taken with :meth:`hold` (idempotent; an expired hold is already gone)."""
        self._engine.holds.release(hold_id)

    def on_publish(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` synchronously after every publication; returns a remover."""
        return self._engine.add_listener(lambda new, old: callback())

    def attach_peer(self, peer: UpstreamPeer) -> Callable[[], None]:
        """Make ``peer`` answer what upstream servers start (the relay); returns a detacher.
        The one thing this window changes on the engine: it replaces the engine's refusal."""
        return self._engine.attach_peer(peer)

    def readiness(self) -> Readiness:
        """The engine's readiness for ``/readyz``: ready while a generation can be served, with
        its degraded conditions named (``Engine.readiness``)."""
        return self._engine.readiness()
