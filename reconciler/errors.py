"""Typed engine errors. Messages are safe to show a client (I12): they name revisions and
sources, never upstream text, paths, hosts or ports."""

from __future__ import annotations


class ReconcilerError(Exception):
    """Base of every error the engine raises on purpose."""

    code: str = "internal_error"
    retryable: bool = False


class GenerationDrainedError(ReconcilerError):
    """The operation's generation reached its drain deadline and was closed under it."""

    code = "generation_drained"
    retryable = True

    def __init__(self, revision: int) -> None:
        super().__init__(
            f"revision {revision} was retired while this operation ran past its drain deadline; "
            "retry on the current revision"
        )
        self.revision = revision


class RevisionUnavailableError(ReconcilerError):
    """A client asked for a revision that is not live any more (or never was)."""

    code = "revision_unavailable"
    retryable = False

    def __init__(self, revision: int, current: int | None) -> None:
        now = f"the current revision is {current}" if current is not None else "nothing is published yet"
        super().__init__(f"revision {revision} is not live; {now}")
        self.revision = revision
        self.current = current


class SourceReadError(ReconcilerError):
    """A source could not be listed completely. ``reason`` is already sanitized for clients;
    ``detail`` is for operator logs only (bounded, redacted by the caller)."""

    code = "source_unavailable"
    retryable = True

    def __init__(self, reason: str, *, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class CycleFailedError(ReconcilerError):
    """A reconcile cycle failed as a whole (timeout, invalid desired state, closed runtime)."""

    code = "cycle_failed"
    retryable = True


class ReconcilerClosedError(ReconcilerError):
    """The engine is closed; no new cycles, pins or publications."""

    code = "closed"
    retryable = False

    def __init__(self) -> None:
        super().__init__("the gateway is shutting down")
