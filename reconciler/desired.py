"""What the reconciler should converge to: the desired source specs plus the provenance of
the inputs they came from (I11)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from mcp_reconciler.reconciler.approvals import DEFAULT_POLICY as NO_APPROVALS
from mcp_reconciler.reconciler.approvals import ApprovalPolicy
from mcp_reconciler.reconciler.curation import NO_CURATION, Curation
from mcp_reconciler.reconciler.discovery import DEFAULT_POLICY, DiscoveryPolicy
from mcp_reconciler.reconciler.model import SessionSpec, SourceSpec
from mcp_reconciler.reconciler.rate_limits import NO_LIMITS, LimitPolicy


@dataclass(frozen=True, slots=True)
class TrackedInput:
    """A tracked input file as of the newest load: the ``source`` whose ``watch`` it matches
    (``None``: a config file or drop-in), whether it existed, and its mtime (wall clock)."""

    path: str
    source: str | None
    exists: bool
    modified_at: float | None


@dataclass(frozen=True, slots=True)
class DesiredState:
    """One consistent reading of the configuration.

    ``inputs_digest`` maps a source name to the fingerprint digest of that source's watched
    inputs: when it changes, the source is re-read on a new connection (respawned).
    ``config_error`` is set when the newest config on disk is invalid and ``specs`` are the
    last good ones (I11: reported, never silently served as current). ``sessions`` are the
    sessions the config declares (from the same good config as ``specs``). ``inputs`` lists
    tracked files (config first, then per source; bounded by the loader) for status."""

    specs: tuple[SourceSpec, ...]
    reload_mode: str = "manual"
    tracked_files: int = 0
    warnings: tuple[str, ...] = ()
    inputs_digest: dict[str, str] = field(default_factory=dict)
    config_error: str | None = None
    sessions: tuple[SessionSpec, ...] = ()
    inputs: tuple[TrackedInput, ...] = ()
    #: Filters, renames and views applied when the states are merged (from the same good config).
    curation: Curation = NO_CURATION
    #: Discovery modes and the search-mode settings (ADR 0029; from the same good config).
    discovery: DiscoveryPolicy = DEFAULT_POLICY
    #: Which tools need an approval, and the parked-call bounds (ADR 0034; same good config).
    approvals: ApprovalPolicy = NO_APPROVALS
    #: Rate and concurrency limits (ADR 0033; from the same good config), swapped in after the cycle.
    limits: LimitPolicy = NO_LIMITS

    def spec(self, name: str) -> SourceSpec | None:
        """The spec of source ``name``, or None if this state has no such source (O(sources))."""
        for s in self.specs:
            if s.name == name:
                return s
        return None


class DesiredStateSource(Protocol):
    """Produces the desired state for one reconcile cycle (re-reading inputs as needed)."""

    async def load(self) -> DesiredState:
        """One consistent reading of the inputs. An invalid newer config is reported in
        ``config_error`` next to the last good specs (I11); an exception fails the cycle, which the
        trigger queue retries with backoff."""


class StaticDesiredState:
    """A desired state held in memory; ``set`` replaces it (tests, embedding, demos)."""

    def __init__(self, specs: tuple[SourceSpec, ...] | list[SourceSpec] = ()) -> None:
        self._state = DesiredState(specs=tuple(specs))

    def set(self, state: DesiredState | tuple[SourceSpec, ...] | list[SourceSpec]) -> None:
        """Replace the state the next :meth:`load` returns (a bare spec sequence means just those specs)."""
        self._state = state if isinstance(state, DesiredState) else DesiredState(specs=tuple(state))

    async def load(self) -> DesiredState:
        """The state last given to :meth:`set` (or the constructor); never raises."""
        return self._state
