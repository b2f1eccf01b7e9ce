"""Live per-source health, for status answers (I11). Mutable by design: it describes the
present, while generations describe what was published."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from mcp_reconciler.reconciler.failure_cause import FailureCause

log = logging.getLogger("mcp_reconciler.health")

#: The cause recorded when a ready source's connection ended and its reconnect is held back.
CONNECTION_LOST = "upstream connection lost; reconnect pending"


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """One source's latest health, as of its newest read (immutable; replaced on change)."""

    source: str
    status: str = "connecting"  # ready | stale | failed | connecting
    last_ok_at: float | None = None
    last_error: str | None = None  # sanitized; the cause, never "reconnect throttled"; None when ready
    last_error_at: float | None = None
    consecutive_failures: int = 0
    entries: int = 0
    cause: FailureCause | None = None  # the typed cause of last_error (failure_cause.py); None when ready


class HealthBoard:
    """Latest health per source; readers get immutable snapshots."""

    def __init__(self) -> None:
        self._by_source: dict[str, SourceHealth] = {}
        self._listeners: list[Callable[[SourceHealth, SourceHealth | None], None]] = []

    def add_listener(self, listener: Callable[[SourceHealth, SourceHealth | None], None]) -> Callable[[], None]:
        """Call ``listener(new, previous)`` synchronously when a source's status or last error
        changes (not on every read: a ready source read again is no news); returns a remover."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _set(self, new: SourceHealth) -> None:
        previous = self._by_source.get(new.source)
        self._by_source[new.source] = new
        if previous is not None and (previous.status, previous.last_error) == (new.status, new.last_error):
            return
        for listener in list(self._listeners):
            try:
                listener(new, previous)
            except Exception:
                log.exception("source health listener failed")

    def get(self, source: str) -> SourceHealth:
        """The source's latest health; a fresh ``connecting`` record if nothing was recorded for it."""
        return self._by_source.get(source) or SourceHealth(source)

    def ok(self, source: str, at: float, *, entries: int) -> None:
        """The source listed completely: ready, and the error it had is resolved (cleared)."""
        self._set(
            replace(
                self.get(source),
                status="ready",
                last_ok_at=at,
                last_error=None,
                last_error_at=None,
                cause=None,
                consecutive_failures=0,
                entries=entries,
            )
        )

    def throttled(self, source: str, at: float) -> None:
        """A read was held back by the reconnect throttle: not a failure of its own, so the
        error that caused the throttle stays the source's last error (when the next attempt is
        allowed is the reconnect schedule's to say: ``next_attempt_at``). A source that was
        ready lost its connection (that is why it needs a new one): it turns stale with that
        cause."""
        h = self.get(source)
        if h.status in ("ready", "connecting"):
            self._set(
                replace(
                    h,
                    status="stale" if h.last_ok_at is not None else "failed",
                    last_error=h.last_error or CONNECTION_LOST,
                    last_error_at=h.last_error_at if h.last_error else at,
                )
            )

    def failed(self, source: str, at: float, reason: str, *, cause: FailureCause | None = None) -> None:
        """A read failed for ``reason`` (sanitized; ``cause``'s summary when classified): the
        source's new last error."""
        h = self.get(source)
        self._set(
            replace(
                h,
                status="stale" if h.last_ok_at is not None else "failed",
                last_error=reason,
                last_error_at=at,
                cause=cause,
                consecutive_failures=h.consecutive_failures + 1,
            )
        )

    def snapshot(self) -> dict[str, SourceHealth]:
        """A snapshot by source name; values are immutable, the dict is the caller's."""
        return dict(self._by_source)
