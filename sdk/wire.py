"""Wire models of the control API (JSON under ``/v1``). The OpenAPI document is generated
from these and the route table in ``api/control.py`` (``api/openapi.json``).

It is over 400 lines because it holds every model of the API's wire format in one module: the
OpenAPI document, the SDK and the CLI all read the same definitions, and each model is small.
It lives in ``sdk/`` so the Python SDK imports nothing of ``api/`` (the gateway's ``api/``
imports it; issue 26, ADR 0009); it imports only pydantic."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorBody(_Model):
    """The error of a failed request: a stable ``code`` and a sanitized ``message`` (never a token or secret)."""

    code: str
    message: str
    bound: str | None = Field(
        default=None, description="429 at a quota: the config key of the bound that refused (ADR 0032)"
    )
    limit: int | None = Field(default=None, description="429 at a quota: that bound's value")


class ErrorOut(_Model):
    """The body of every error answer (4xx and 5xx)."""

    error: ErrorBody


class FailureCauseOut(_Model):
    """Why a source's last read failed, typed (``reconciler/failure_cause.py``). For operators:
    ``stderr_tail`` holds the upstream's last stderr lines, redacted like the log."""

    kind: str = Field(
        description="timeout | connection_refused | dns | tls | http_status | process_not_found | "
        "process_exited | protocol | bound_exceeded | rejected | unavailable"
    )
    summary: str = Field(description="sanitized sentence; the same text as last_error")
    setting: str | None = Field(default=None, description="the config key to change, e.g. timeouts.connect_s")
    timeout_s: float | None = None
    http_status: int | None = None
    exit_code: int | None = None
    stderr_tail: list[str] = Field(default_factory=list, description="the upstream's last stderr lines, redacted")


class SourceOut(_Model):
    """One source's live health and listing state (``/v1/sources``, ``/v1/status``)."""

    name: str
    state: str = Field(description="ready | stale | failed | connecting")
    entries: int
    last_ok_at: float | None = None
    last_error: str | None = Field(default=None, description="sanitized reason")
    last_error_at: float | None = None
    consecutive_failures: int = 0
    next_attempt_at: float | None = Field(default=None, description="throttled reconnect time (I8)")
    diagnostics: int = 0
    trust: Literal["trusted", "untrusted"] | None = Field(
        default=None, description="untrusted: the source's metadata is projected before it is served (I20)"
    )
    cause: FailureCauseOut | None = Field(default=None, description="the typed cause of last_error")


class DiagnosticOut(_Model):
    """Why an entry or source was rejected or changed when the current revision was built."""

    code: str
    source: str | None = None
    name: str | None = None
    path: str | None = Field(default=None, description="field path inside the entry's definition (metadata_*)")
    message: str


class RetiringOut(_Model):
    """A superseded revision still open: it closes when its pins reach zero or at its drain deadline."""

    revision: int
    pins: int
    operations: int
    superseded_at: float | None = None
    drain_deadline_in_s: float | None = None


class CycleOut(_Model):
    """The outcome of the last finished reconcile cycle."""

    seq: int
    status: str
    finished_at: float
    error: str | None = None


class ConditionOut(_Model):
    """A typed reason the gateway is degraded or in error while it keeps serving."""

    type: Literal["config_invalid", "publication_deferred"]
    reason: str = Field(description="stable code: last_good_config_serving | retiring_set_full")
    message: str = Field(description="sanitized: revisions, counts and times only")


class AuditOut(_Model):
    """The audit trail's counters (ADR 0031, I23): records written, dropped because the queue was
    full, failed at the sink (a full disk), waiting now, and the queue bound."""

    written: int
    dropped: int
    failed: int
    queued: int
    queue_max: int


class ClusterOut(_Model):
    """This replica's view of the cluster (ADR 0020)."""

    replica_id: str
    store: str
    healthy: bool = Field(description="the store answered within the staleness bound")
    members: list[str]
    ledger_revision: int | None
    ledger_digest: str | None
    diverged: bool = Field(description="this replica's catalog differs from the revision ledger's head")
    last_error: str | None = None
    difference: list[str] = Field(
        default_factory=list, description="diverged: per source, how this replica differs from one serving the head"
    )


class InputOut(_Model):
    """A tracked input file as of the newest load, and when it last changed (operators only)."""

    path: str
    source: str | None = Field(description="the source whose watch globs match it; null: a config file")
    exists: bool
    modified_at: float | None = Field(description="mtime as of the newest load (wall clock)")


class ViewOut(_Model):
    """One named view (``views:`` in the config), served at ``/mcp/<name>``: its entry counts in
    the current revision, in all and by kind."""

    name: str
    entries: int
    tools: int = 0
    resources: int = 0
    resource_templates: int = 0
    prompts: int = 0


DISCOVERY_IN = "search: lists find_tools, the always-visible tools and what it found (null: view's or config's mode)"
SEARCH_INDEXES = "tool search indexes of the live revisions (search mode): size and build time per revision"


class SearchIndexOut(_Model):
    """One built search index (ADR 0029): the revision and view (null: the whole catalog) it
    covers, its size and how long it took to build. Built on the first search of a revision."""

    revision: int
    view: str | None
    tools: int
    terms: int
    bytes: int
    build_ms: float


class StatusOut(_Model):
    """One consistent reading of the gateway (``GET /v1/status``). ``state``: ``starting`` before the
    first publication, ``error`` while the newest config is invalid (the last good one serves),
    ``degraded`` with stale sources or a deferred publication, else ``ready``."""

    state: Literal["starting", "ready", "degraded", "error"]
    revision: int | None
    digest: str | None
    built_at: float | None
    published_at: float | None
    age_s: float | None
    reconciling: bool
    dirty: list[str]
    reload_mode: str | None
    tracked_files: int
    warnings: list[str]
    config_error: str | None
    stale_sources: list[str]
    sources: list[SourceOut]
    entries: int
    diagnostics: list[DiagnosticOut] = Field(
        description="the current revision's findings: merge-level ones (name collisions, sources over "
        "bounds), then every entry a source's listing rejected; bounded, see diagnostics_total"
    )
    retiring: list[RetiringOut]
    pending_publication: bool
    last_cycle: CycleOut | None
    inputs_changed_since_build: list[str] | None = None
    holds: int = 0
    sessions: int = 0
    diagnostics_total: int = Field(default=0, description="all findings, also those past the listed bound")
    conditions: list[ConditionOut] = Field(
        default_factory=list,
        description="why the gateway is degraded or in error while it serves (typed; e.g. publication deferred)",
    )
    cluster: ClusterOut | None = Field(default=None, description="many replicas: this replica's view (ADR 0020)")
    inputs: list[InputOut] = Field(
        default_factory=list, description="tracked files as of the newest load (operators only; at most 200)"
    )
    views: list[ViewOut] = Field(
        default_factory=list, description="the named views of the current revision, served at /mcp/<name>"
    )
    search_indexes: list[SearchIndexOut] = Field(default_factory=list, description=SEARCH_INDEXES)
    audit: AuditOut | None = Field(
        default=None, description="the audit trail's counters, when telemetry.audit is on (operators only)"
    )


class RefreshIn(_Model):
    """``POST /v1/refresh``: re-list the named sources (default: all); with ``wait``, answer when the
    first cycle that starts afterwards finished, within ``timeout_s``."""

    sources: list[str] | None = Field(default=None, max_length=128, description="default: every source")
    wait: bool = True
    timeout_s: float = Field(default=30.0, gt=0, le=300)


class RefreshOut(_Model):
    """The cycle that answered a waited refresh, and status right after it."""

    revision: int | None
    changed: bool
    cycle: int
    cycle_status: Literal["published", "unchanged", "deferred", "failed"]
    error: str | None = None
    status: StatusOut
    replicas_done: list[str] | None = Field(
        default=None, description="clustered: the other live replicas that ran a cycle after this request"
    )
    replicas_pending: list[str] | None = Field(
        default=None, description="clustered: the other live replicas that had not finished one by the deadline"
    )


class RefreshAccepted(_Model):
    """A refresh that was not waited for (202): ``ticket`` is the cycle that will answer it."""

    ticket: int = Field(description="the cycle that will answer this request")
    revision: int | None


class TriggerOut(_Model):
    """Why a revision's catalog was built: the trigger reasons and the keys they marked dirty."""

    reasons: list[str] = Field(
        description="why its keys were marked dirty: startup | config | watched_file | list_changed | reconnect | "
        "refresh | poll | retry"
    )
    keys: list[str] = Field(description="what was marked: source names, config, all")


class HoldRefOut(_Model):
    """A revision hold keeping a generation live: its id, owner principal and expiry."""

    id: str
    owner: str
    expires_at: float


class GenerationOut(_Model):
    """One live revision and the pins that keep it open."""

    revision: int
    digest: str
    built_at: float
    published_at: float
    state: Literal["current", "retiring"]
    pins: int
    entries: int
    stale_sources: list[str]
    trigger: TriggerOut | None = Field(default=None, description="why this revision's catalog was built")
    operations: int = 0
    superseded_at: float | None = None
    drain_deadline_at: float | None = Field(
        default=None, description="retiring: closed at the latest then (wall clock; holds extend it)"
    )
    holds: list[HoldRefOut] = Field(default_factory=list, description="holds on it (owners: only their own)")


class GenerationsOut(_Model):
    """The live revisions (``GET /v1/generations``): current first, then the retiring ones, newest first."""

    current: int | None
    generations: list[GenerationOut]
    pending_publication: bool


class EntryOut(_Model):
    """One catalog entry: its exposed name, its upstream name and source, and its definition digest."""

    kind: Literal["tool", "resource", "resource_template", "prompt"]
    name: str
    upstream_name: str
    source: str
    digest: str


class CatalogOut(_Model):
    """Every entry of one live revision (``GET /v1/catalog``)."""

    revision: int
    digest: str
    entries: list[EntryOut]


class SessionIn(_Model):
    """``POST /v1/sessions``: how the new session's grants start (and, for ``follow``, grow)."""

    owner: str | None = Field(
        default=None,
        max_length=128,
        description="operators only: the owner (by name) the session is for; owners get their own",
    )
    grant_policy: Literal["current", "none", "explicit", "follow"] = "current"
    names: list[str] = Field(default_factory=list, max_length=1024, description="explicit only")
    sources: list[str] = Field(
        default_factory=list, max_length=128, description="follow only: the sources it follows (default: all)"
    )
    revision: int | None = Field(default=None, description="pin the session to this live revision")
    control_tools: bool = Field(
        default=False, description="operators only: the session may call the built-in gateway_status/gateway_refresh"
    )
    view: str | None = Field(
        default=None,
        max_length=64,
        description="bind the session to this named view (views: in the config): it sees and calls only its names, "
        "on /mcp/<view> (or /mcp)",
    )
    discovery: Literal["all", "search"] | None = Field(default=None, description=DISCOVERY_IN)


class SessionOut(_Model):
    """A session as its owner or an operator sees it (never its token); ``names`` lists at most 1000
    of the ``granted`` names."""

    id: str
    owner: str = Field(description="role-qualified principal id, e.g. owner::alice, config::ci")
    created_at: float
    pinned_revision: int | None
    granted: int
    names: list[str]
    drifted: list[str]
    grant_policy: Literal["current", "none", "explicit", "follow"] = "current"
    sources: list[str] | None = Field(default=None, description="follow: the sources it follows (null: all)")
    declared: bool = Field(default=False, description="declared in the config (change it there)")
    quarantined: list[str] = Field(
        default_factory=list,
        description="granted names whose definition changed since the grant, refused under drift_policy quarantine",
    )
    last_active_at: float | None = Field(default=None, description="newest call or read by the session")
    view: str | None = Field(default=None, description="the named view the session is bound to (null: none)")
    discovery: Literal["all", "search"] = Field(default="all", description="the session's discovery mode in effect")
    found: list[str] = Field(default_factory=list, description="search mode: the tools find_tools made visible")
    expires_at: float | None = Field(
        default=None,
        description="idle expiry: when the session is removed if it stays unused from now on (epoch seconds); "
        "null while it is in use, or when it never expires (declared in the config, or expiry off)",
    )
    in_use: bool = Field(
        default=False,
        description="a request in flight, an open MCP connection, or a live revision hold of its owner: never expires",
    )


class SessionCreated(SessionOut):
    """A session just created; the only answer that carries its ``token``."""

    token: str = Field(description="bearer token for this session's MCP requests; shown once")


class SessionsOut(_Model):
    """The sessions visible to the caller (``GET /v1/sessions``): their own, or all for an operator."""

    sessions: list[SessionOut]


class SessionRefreshOut(_Model):
    """What a session refresh granted: the names added or refreshed at ``revision``."""

    revision: int | None
    added: list[str]


class GrantsIn(_Model):
    """``POST /v1/sessions/{id}/grants``: exposed names to grant, all or nothing."""

    names: list[str] = Field(min_length=1, max_length=1024)


class GrantsOut(_Model):
    """What a grant added or refreshed, at the current ``revision``."""

    revision: int
    added: list[str]


class RevokedOut(_Model):
    """What a revocation took away from a session (``POST /v1/sessions/{id}/revoke``)."""

    removed: list[str]


class HoldIn(_Model):
    """``POST /v1/revisions/{n}/holds``: how long to keep the revision live (at most an hour)."""

    ttl_s: float = Field(default=600.0, gt=0, le=3600)


class HoldOut(_Model):
    """A revision hold: the revision stays live until ``expires_at`` (wall clock) or release."""

    id: str
    revision: int
    owner: str
    created_at: float
    expires_at: float
    digest: str | None = Field(
        default=None,
        description="the held revision's replica-independent content digest: send it with the revision "
        "(MCP-Reconciler-Digest header or io.mcp-reconciler/digest _meta) to be served exactly that catalog",
    )


class ApprovalOut(_Model):
    """An approval request (ADR 0034): who calls which tool with which arguments (their sha256 of
    canonical JSON), on which definition (its digest) at which revision, until when; its
    ``state`` and who decided it. Approving runs exactly that definition or nothing (I22)."""

    id: str
    state: Literal["pending", "approved", "denied", "expired", "withdrawn"]
    principal: str
    session: str
    tool: str
    arguments_digest: str
    definition_digest: str
    revision: int
    requested_at: float
    expires_at: float
    decided_by: str | None = None
    uses: int = 1
    window_s: float = 0.0


class ApprovalsOut(_Model):
    """``GET /v1/approvals``: pending requests first (oldest first), then recently decided ones."""

    approvals: list[ApprovalOut]


class ApprovalDecisionIn(_Model):
    """``POST /v1/approvals/{id}/approve``: optionally also cover more calls of the same principal,
    tool, arguments and definition — ``uses`` calls in all, and/or any within ``window_s`` seconds."""

    uses: int = Field(default=1, ge=1, le=10_000)
    window_s: float = Field(default=0.0, ge=0, le=86_400)


class SessionApprovalIn(_Model):
    """``PUT /v1/sessions/{id}/approval``: served tool names or globs whose calls need an approval
    in this session (beside the config's ``approvals.required``). An owner may only add to them."""

    required: list[str] = Field(default_factory=list, max_length=256)


class SessionApprovalOut(_Model):
    """A session's own approval globs."""

    session: str
    required: list[str]


class HealthOut(_Model):
    """``GET /healthz``: the process answers (``status`` is ``ok``)."""

    status: str


class ReadyOut(_Model):
    """``GET /readyz``: ready (200) once a generation is published and the gateway is not shutting
    down; ``reason`` says why not (503); ``conditions`` degrade a ready gateway without stopping it."""

    ready: bool
    revision: int | None
    reason: str | None = None
    conditions: list[str] = Field(
        default_factory=list, description="degraded conditions of a ready gateway (it still serves)"
    )


def error(code: str, message: str, *, bound: str | None = None, limit: int | None = None) -> dict[str, Any]:
    """The body of an error answer (``ErrorOut``); ``bound`` and ``limit`` only when set (a quota's 429)."""
    body = ErrorOut(error=ErrorBody(code=code, message=message, bound=bound, limit=limit))
    return body.model_dump(mode="json", exclude_none=True)


def dump(model: BaseModel) -> dict[str, Any]:
    """``model`` as JSON-ready data (the wire encoding every answer uses)."""
    return model.model_dump(mode="json")
