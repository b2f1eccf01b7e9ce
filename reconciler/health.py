"""Live per-source health, for status answers (I11). Mutable by design: it describes the
present, while generations describe what was published."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """One source's latest health, as of its newest read (immutable; replaced on change)."""

    source: str
    status: str = "connecting"  # ready | stale | failed | connecting
    last_ok_at: float | None = None
    last_error: str | None = None  # sanitized
    last_error_at: float | None = None
    consecutive_failures: int = 0
    entries: int = 0


class HealthBoard:
    """Latest health per source; readers get immutable snapshots."""

    def __init__(self) -> None:
        self._by_source: dict[str, SourceHealth] = {}

    def get(self, source: str) -> SourceHealth:
        return self._by_source.get(source) or SourceHealth(source)

    def ok(self, source: str, at: float, *, entries: int) -> None:
        self._by_source[source] = replace(
            self.get(source),
            status="ready",
            last_ok_at=at,
            consecutive_failures=0,
            entries=entries,
        )

    def failed(self, source: str, at: float, reason: str) -> None:
        h = self.get(source)
        self._by_source[source] = replace(
            h,
            status="stale" if h.last_ok_at is not None else "failed",
            last_error=reason,
            last_error_at=at,
            consecutive_failures=h.consecutive_failures + 1,
        )

    def snapshot(self) -> dict[str, SourceHealth]:
        return dict(self._by_source)
