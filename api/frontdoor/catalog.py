"""The front door's one window onto the engine.

Every part of the front door reads the catalog through :class:`CatalogAccess` and nothing else
reaches into the ``Reconciler`` (its runtime, its bounds, its last desired state). When the
engine offers a narrow facade, this file is the only one that changes."""

from __future__ import annotations

from collections.abc import Callable

from mcp_reconciler.reconciler.reconcile import Reconciler
from mcp_reconciler.reconciler.runtime import LiveGeneration


class CatalogAccess:
    """Read-only access to the engine's live generations for the front door. Every method reads
    the engine's state at call time; none of them blocks or changes it."""

    def __init__(self, rec: Reconciler) -> None:
        self._rec = rec
        self._runtime = rec.runtime  # the runtime is fixed for the reconciler's lifetime

    def current(self) -> LiveGeneration | None:
        """The current (newest published) generation, or ``None`` before the first publication."""
        return self._runtime.current

    def get(self, revision: int) -> LiveGeneration:
        """The live generation with ``revision``; raises the engine's ``RevisionUnavailableError``
        when it is not live (never published, or retired)."""
        return self._runtime.get(revision)

    @property
    def closed(self) -> bool:
        """The engine is shutting down: no new operation may start."""
        return self._runtime.closed

    @property
    def current_revision(self) -> int | None:
        """The current generation's revision, or ``None`` before the first publication."""
        return self._runtime.current_revision

    @property
    def operation_deadline_s(self) -> float:
        """The engine's bound on one forwarded operation (seconds)."""
        return self._rec.bounds.operation_deadline_s

    def on_publish(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` synchronously after every publication; returns a remover."""
        return self._runtime.add_listener(lambda new, old: callback())

    def readiness(self) -> tuple[bool, str | None]:
        """``(ready, reason)`` for ``/readyz``: ready once a generation is published and the
        config last read is valid; ``reason`` is ``config_invalid`` or ``no_generation_published``."""
        desired = self._rec.last_desired
        config_invalid = desired is not None and desired.config_error is not None
        if config_invalid:
            return False, "config_invalid"
        if self._runtime.current is None:
            return False, "no_generation_published"
        return True, None
