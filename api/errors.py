"""Stable, sanitized client-facing errors (I12) — the edge's error module.

Every engine error maps to one JSON-RPC error code and a short message that names revisions and
exposed names only. Upstream error text, paths, hosts and ports go to the operator log.
:class:`ApiError` is the control API's HTTP error (status, stable code, sanitized message).
The engine's own error classes live in ``reconciler/errors.py``; none is redefined here.

The sanitization boundary (ADR 0014). What a client receives falls in exactly two classes:

- **Upstream content, passed through as the tool's answer.** A *successful* JSON-RPC response
  from the upstream — a ``tools/call`` result (``isError: true`` included: that is the tool
  telling its caller it failed, part of the tool's contract with the model, not a gateway or
  transport failure), a ``resources/read`` result, a ``prompts/get`` result — is forwarded as
  the upstream sent it, content untouched; the gateway only replaces ``_meta`` keys of its own
  and of the protocol. It reaches only the session that made the call, under its grant.
- **Everything the gateway says itself, sanitized here.** A JSON-RPC *error* from the upstream
  (``MCPError``: the server failed to answer, its message is server internals) becomes
  ``upstream_error`` (-32016) with only the numeric ``upstream_code``; a dead or unreachable
  upstream, a deadline, an unknown or ungranted name, a revision that is not live, the gateway
  shutting down: each is a fixed message naming revisions and exposed names at most; anything
  unexpected is ``internal_error`` with details in the operator log only. An upstream answer
  refused at ``limits.upstream_message_bytes`` while read is ``upstream_message_too_large``
  (-32020), naming the bound, its config key and the size (ADR 0025). A call refused by
``rate_limits:`` is ``rate_limited`` (-32021) or ``concurrency_limited`` (-32022), naming the limit
and a retry-after, also in the error data's ``_meta`` (ADR 0033). HTTP-layer refusals
  (401 on ``/mcp``, 421/403 for a foreign Host/Origin) carry fixed texts (``api/mcp_auth.py``,
  ``api/host_check.py``); control-API errors are bounded (``api/routes.py``).

So :func:`to_mcp_error` never includes upstream text, and nothing in the front door rewrites a
tool's result content."""

from __future__ import annotations

import logging
from typing import Any

from mcp import MCPError

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.catalog import bounded
from mcp_reconciler.reconciler.errors import (
    ApprovalDeniedError,
    ApprovalExpiredError,
    ApprovalLimitError,
    ApprovalWithdrawnError,
    ClusterUnavailableError,
    ConcurrencyLimitedError,
    DefinitionChangedError,
    GenerationDrainedError,
    GrantError,
    LimitError,
    LimitUnavailableError,
    OperationDeadlineError,
    QuarantinedNameError,
    QuotaError,
    RateLimitedError,
    ReconcilerClosedError,
    ReconcilerError,
    RevisionUnavailableError,
    SourceReadError,
    UnavailableNameError,
    UnknownNameError,
    UpstreamUnavailableError,
)
from mcp_reconciler.reconciler.peer_contract import MESSAGE_TOO_LARGE, MESSAGE_TOO_LARGE_CODE, MessageBoundError

log = logging.getLogger("mcp_reconciler.frontdoor")

#: Upstream text in operator logs is bounded like a diagnostic (I12).
DIAGNOSTIC_BYTES = Bounds().diagnostic_bytes

INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

#: JSON-RPC codes per engine error code. Stable: clients may branch on them.
CODES: dict[str, int] = {
    UnknownNameError.code: INVALID_PARAMS,  # like an MCP server's own "unknown tool"
    GrantError.code: INVALID_PARAMS,
    UnavailableNameError.code: -32010,
    QuarantinedNameError.code: -32011,
    RevisionUnavailableError.code: -32012,
    GenerationDrainedError.code: -32013,
    OperationDeadlineError.code: -32014,
    UpstreamUnavailableError.code: -32015,
    "upstream_error": -32016,
    ReconcilerClosedError.code: -32017,
    ClusterUnavailableError.code: -32019,  # many replicas: the shared store is not confirmed (retryable)
    MESSAGE_TOO_LARGE: MESSAGE_TOO_LARGE_CODE,  # an upstream answer refused at a bound while read (ADR 0025)
    # Approvals (ADR 0034): each outcome its own code, so a client can tell them apart.
    ApprovalDeniedError.code: -32040,
    ApprovalExpiredError.code: -32041,
    DefinitionChangedError.code: -32042,  # "definition changed since approval" (I22)
    ApprovalLimitError.code: -32043,
    ApprovalWithdrawnError.code: -32044,
    RateLimitedError.code: -32021,  # a rate rule's bucket is empty (ADR 0033; retryable)
    ConcurrencyLimitedError.code: -32022,  # a source's calls in flight and queue are full (ADR 0033; retryable)
}

#: ``_meta`` keys of a limit refusal's error data (both eras; ADR 0033).
LIMIT_META = "io.mcp-reconciler/limit"
RETRY_AFTER_META = "io.mcp-reconciler/retry-after-s"


#: The engine's class under the name the front door imports (one class, one code: the old
#: duplicate here answered exactly what ``to_mcp_error`` answers for this one).
UpstreamUnavailable = UpstreamUnavailableError


class ApiError(Exception):
    """A control-API error answer: HTTP ``status``, stable ``code``, sanitized ``message`` (I12)."""

    def __init__(
        self, status: int, code: str, message: str, *, bound: str | None = None, limit: int | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.bound, self.limit = bound, limit  # a quota's 429: its config key and value (ADR 0032)

    @classmethod
    def quota(cls, exc: QuotaError) -> ApiError:
        """The 429 of a quota refusal, naming the bound (its config key) and its value."""
        return cls(429, exc.code, str(exc), bound=exc.bound or None, limit=exc.limit)


def to_mcp_error(exc: BaseException, *, revision: int | None = None) -> MCPError:
    """The client-facing form of ``exc``. Never includes upstream text."""
    data: dict[str, Any] = {}
    if revision is not None:
        data["revision"] = revision
    if isinstance(exc, MessageBoundError):
        # The gateway's own words (the bound, its key and size; never the upstream's): passed on.
        # The operator log already has the source and the size (``reconciler/stdio_peer.py``).
        data.update(code=MESSAGE_TOO_LARGE, retryable=False, bound=exc.bound, limit=exc.limit, size=exc.size)
        return MCPError(CODES[MESSAGE_TOO_LARGE], exc.error.message, data)
    if isinstance(exc, MCPError):
        # An upstream protocol error: its message is upstream text (I12), which may carry internal
        # hosts, paths and keys. The WARNING says what happened; the words go to DEBUG only.
        log.warning("upstream returned error %s to a forwarded request", exc.error.code)
        log.debug("upstream error %s: %s", exc.error.code, bounded(str(exc.error.message), DIAGNOSTIC_BYTES))
        data.update(code="upstream_error", retryable=False, upstream_code=exc.error.code)
        return MCPError(CODES["upstream_error"], "the upstream server returned an error", data)
    if isinstance(exc, SourceReadError):
        data.update(code="upstream_unavailable", retryable=True)
        return MCPError(CODES["upstream_unavailable"], "upstream unavailable; retry later", data)
    if isinstance(exc, LimitError | LimitUnavailableError):
        # The limit's name and when to retry: in ``data`` and in its ``_meta`` (ADR 0033).
        retry_after = round(exc.retry_after_s, 3)
        data.update(code=exc.code, retryable=True, limit=exc.limit, retry_after_s=retry_after)
        data["_meta"] = {LIMIT_META: exc.limit, RETRY_AFTER_META: retry_after}
        return MCPError(CODES.get(exc.code, INTERNAL_ERROR), str(exc), data)
    if isinstance(exc, ReconcilerError):
        data.update(code=exc.code, retryable=exc.retryable)
        if isinstance(exc, RevisionUnavailableError) and exc.current is not None:
            data["current_revision"] = exc.current
        return MCPError(CODES.get(exc.code, INTERNAL_ERROR), str(exc), data)
    log.exception("internal error while serving a request", exc_info=exc)
    data.update(code="internal_error", retryable=False)
    return MCPError(INTERNAL_ERROR, "internal error", data)
