"""Typed engine errors — every error the engine raises on purpose, in one module. Messages are
safe to show a client (I12): they name revisions, sources and exposed names, never upstream
text, paths, hosts or ports. ``code`` is stable (the edges map it to JSON-RPC and HTTP codes);
``retryable`` says whether the same request may succeed later.

(The config loader's :class:`~mcp_reconciler.reconciler.config.ConfigError` stays beside the
loader: it carries per-line problems of a file, not an engine state.)"""

from __future__ import annotations

from mcp_reconciler.reconciler.model import EntryKind


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
    #: What the failed connection's transport saw (``failure_cause.Evidence``), when the reader
    #: attached it: the cause of the failure is classified from it and the exception chain.
    evidence: object | None = None

    def __init__(self, reason: str, *, detail: str = "", cause_kind: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail
        #: ``bound_exceeded`` or ``protocol`` when the listing itself says which
        #: (``failure_cause.classify`` reads it); None otherwise.
        self.cause_kind = cause_kind


class UpstreamUnavailableError(SourceReadError):
    """An upstream connection cannot be used: not open, died, or failed to connect. Clients get
    "upstream unavailable; retry later"; ``detail`` is for operator logs only."""

    code = "upstream_unavailable"

    def __init__(self, detail: str = "") -> None:
        super().__init__("upstream unavailable", detail=detail)


class ReconnectThrottledError(SourceReadError):
    """A read needed a new connection before the source's next allowed reconnect (I8). Not a
    failure of its own: the source's last error stays the cause that led to the throttle."""

    code = "reconnect_throttled"

    def __init__(self, wait_s: float, *, detail: str = "") -> None:
        super().__init__(f"reconnect throttled; next attempt in {max(wait_s, 0.1):.1f} s", detail=detail)
        self.wait_s = wait_s


class CycleFailedError(ReconcilerError):
    """A reconcile cycle failed as a whole (timeout, invalid desired state, closed runtime)."""

    code = "cycle_failed"
    retryable = True


class ReconcilerClosedError(ReconcilerError):
    """The engine is closed; no new cycles, pins or publications. Retryable: the same request
    may succeed on another replica, or on this gateway once it is back."""

    code = "closed"
    retryable = True

    def __init__(self) -> None:
        super().__init__("the gateway is shutting down")


class OperationDeadlineError(ReconcilerError):
    """The operation ran past its own deadline (``Bounds.operation_deadline_s``)."""

    code = "deadline_exceeded"
    retryable = True

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the operation exceeded its deadline of {seconds:g} s")
        self.seconds = seconds


# -- authority (I9, I10) -----------------------------------------------------------------------


def _noun(kind: EntryKind) -> str:
    return {"tool": "tool", "resource": "resource", "resource_template": "resource template", "prompt": "prompt"}[
        kind.value
    ]


class UnknownNameError(ReconcilerError):
    """The session was never granted this name — indistinguishable from a name that does not exist (I9)."""

    code = "unknown_name"

    def __init__(self, kind: EntryKind, name: str) -> None:
        super().__init__(f"unknown {_noun(kind)}: {name}")
        self.kind, self.name = kind, name


class UnavailableNameError(ReconcilerError):
    """A granted name is absent from the session's generation; it works again if it returns (I9)."""

    code = "currently_unavailable"
    retryable = True

    def __init__(self, kind: EntryKind, name: str, revision: int) -> None:
        super().__init__(f"{_noun(kind)} {name} is currently unavailable (revision {revision}); it may return")
        self.kind, self.name, self.revision = kind, name, revision


class QuarantinedNameError(ReconcilerError):
    """A granted tool's definition drifted and the drift policy is ``quarantine`` (I10)."""

    code = "quarantined"

    def __init__(self, kind: EntryKind, name: str) -> None:
        super().__init__(
            f"{_noun(kind)} {name} changed its definition since it was granted and is quarantined; "
            "the session owner must grant it again"
        )
        self.kind, self.name = kind, name


class GrantError(ReconcilerError):
    """A grant request names something the generation does not offer, or exceeds a bound; nothing was granted."""

    code = "invalid_grant"


class QuotaError(ReconcilerError):
    """A bound on what a principal (or everyone together) may hold is reached (ADR 0032).
    ``bound`` is the config key that sets it (``gateway.limits.<key>``) and ``limit`` its value;
    both are safe to show to the caller (the control API answers 429 naming them)."""

    retryable = True

    def __init__(self, message: str, *, bound: str = "", limit: int = 0) -> None:
        super().__init__(message)
        self.bound, self.limit = bound, limit


class SessionLimitError(QuotaError):
    """A session bound (``limits.sessions``, ``limits.sessions_per_principal``) is reached."""

    code = "too_many_sessions"


class GrantLimitError(QuotaError, GrantError):
    """A session would hold more names than ``limits.grants_per_session``; nothing was granted.
    A :class:`GrantError` too, so whoever refuses a grant as a batch still does."""

    code = "too_many_grants"

    code = "too_many_grants"


class StreamLimitError(QuotaError):
    """An event-stream bound (``limits.event_streams``, ``limits.event_streams_per_principal``) is reached."""

    code = "too_many_streams"


# -- revision holds --------------------------------------------------------------------------------


class HoldError(ReconcilerError):
    """An invalid hold request (e.g. a TTL outside the allowed range)."""

    code = "invalid_hold"


class HoldLimitError(QuotaError):
    """Too many revision holds (``limits.holds`` in total, ``limits.holds_per_principal`` for one principal)."""

    code = "too_many_holds"


class HoldSlotsError(HoldLimitError):
    """A hold would let holds keep more superseded revisions alive than the retiring set can spare
    (``retiring_max - 1``), which could defer publication for as long as the holds last (I5).
    Retryable: it succeeds once a hold on another revision is released or expires."""

    code = "hold_slots_full"


class ClusterUnavailableError(ReconcilerError):
    """The cluster store could not be reached within the staleness bound, so this replica cannot
    confirm the authority a call needs (or record a change): retry later or on another replica.
    Never answered by falling back to this replica's memory."""

    code = "cluster_unavailable"
    retryable = True

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            "the cluster store is unreachable; this replica cannot confirm session authority right now"
            + (f" ({detail})" if detail else "")
        )


class ClusterConflictError(ReconcilerError):
    """Another replica changed the same record first (compare-and-set lost); the newer record
    was loaded: read it again and retry."""

    code = "cluster_conflict"
    retryable = True

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} was changed concurrently on another replica; retry")


class RevisionNotHereError(RevisionUnavailableError):
    """The revision exists in the cluster's ledger but this replica has no live generation for it
    (it restarted, or has not reached it yet): retryable, on this replica later or on another."""

    code = "revision_unavailable"
    retryable = True


# -- approvals (reconciler/approvals.py, ADR 0034) ---------------------------------------------------


class ApprovalDeniedError(ReconcilerError):
    """The call needed an approval and it was denied."""

    code = "approval_denied"

    def __init__(self, approval_id: str) -> None:
        super().__init__(f"approval {approval_id} was denied; the call did not run")


class ApprovalExpiredError(ReconcilerError):
    """The call needed an approval and nobody answered before its expiry. Retrying asks again."""

    code = "approval_expired"
    retryable = True

    def __init__(self, approval_id: str, timeout_s: float) -> None:
        super().__init__(f"approval {approval_id} expired unanswered after {timeout_s:g} s; the call did not run")


class DefinitionChangedError(ReconcilerError):
    """The tool's definition changed between the approval request and the run (or the approved
    generation could not be kept), so the approved call does not run (I22). Retrying asks for an
    approval of the new definition."""

    code = "definition_changed"
    retryable = True

    def __init__(self, approval_id: str, tool: str, revision: int) -> None:
        super().__init__(
            f"definition changed since approval: {tool} (approved on revision {revision}, approval {approval_id}) "
            "is no longer served as approved; the call did not run"
        )


class ApprovalLimitError(ReconcilerError):
    """Too many calls are parked waiting for an approval (in total or for one principal)."""

    code = "too_many_parked_calls"
    retryable = True


class ApprovalWithdrawnError(ReconcilerError):
    """A parked call was answered without a decision: the gateway is shutting down (or the
    session went away). The call did not run; retry it elsewhere or later."""

    code = "approval_withdrawn"
    retryable = True

    def __init__(self, approval_id: str, why: str) -> None:
        super().__init__(f"approval {approval_id} withdrawn: {why}; the call did not run")


class ApprovalStateError(ReconcilerError):
    """An answer to an approval that is not waiting any more (already decided, expired, gone)."""

    code = "approval_not_pending"


class LimitError(ReconcilerError):
    """A call refused by a configured limit (``rate_limits:``, ADR 0033). ``limit`` is the
    rule's name and ``retry_after_s`` when retrying may succeed; both reach the client."""

    retryable = True

    def __init__(self, message: str, *, limit: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after_s = retry_after_s


class RateLimitedError(LimitError):
    """A token bucket of rate rule ``limit`` is empty."""

    code = "rate_limited"

    def __init__(self, limit: str, retry_after_s: float) -> None:
        super().__init__(
            f"rate limit {limit!r} reached; retry after {retry_after_s:.3g} s", limit=limit, retry_after_s=retry_after_s
        )


class ConcurrencyLimitedError(LimitError):
    """Concurrency rule ``limit``: every slot busy and the queue full, or the wait ran out."""

    code = "concurrency_limited"

    def __init__(self, limit: str, retry_after_s: float, *, waited: bool) -> None:
        why = "no slot freed within the queue timeout" if waited else "calls in flight and the queue are full"
        super().__init__(
            f"concurrency limit {limit!r} reached ({why}); retry after {retry_after_s:.3g} s",
            limit=limit,
            retry_after_s=retry_after_s,
        )
        self.waited = waited


class LimitUnavailableError(ClusterUnavailableError):
    """A shared limit could not be checked (the cluster store is unreachable) and the config says
    ``fail: closed``. The code stays ``cluster_unavailable``; ``limit`` names the rule."""

    def __init__(self, limit: str, retry_after_s: float) -> None:
        super().__init__(f"rate limit {limit!r} cannot be checked")
        self.limit = limit
        self.retry_after_s = retry_after_s
