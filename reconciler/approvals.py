"""Approvals bound to a revision (issue 30, ADR 0034): what is approved is what runs (I22).

A tool whose served name matches ``approvals.required`` (config globs) or the calling session's
own ``approval_required`` globs does not run until someone with the right to answer approves
it. The call **parks**: :meth:`ApprovalRegistry.park` records an :class:`ApprovalRequest` naming
the principal, the session, the tool, the digest of its arguments (sha256 of canonical JSON,
``reconciler/digest.py``), the digest and revision of the definition it resolved to, and an
expiry; and it takes a :class:`~reconciler.pins.Pin` on that :class:`LiveGeneration`, so the
generation the approver saw stays live while the call waits (within its drain deadline, I5:
a parked call never extends it, so approvals cannot freeze publication).

Guarantees:

- **Bounded.** At most ``parked_max`` calls are parked in total and ``parked_per_principal``
  per principal — the owner of the calling session, so an owner's sessions share it; one more
  is refused at once (:class:`ApprovalLimitError`, retryable). Each
  waits at most ``timeout_s`` (then :class:`ApprovalExpiredError`). Remembered decisions
  (:data:`RECENT_MAX`) and standing approvals (:data:`COVERS_MAX`) are bounded, oldest dropped.
- **What is approved is what runs (I22).** An approved call runs on the generation it parked on,
  under the definition the request named — or not at all: :func:`definition_kept` says whether
  that still holds at run time (the generation is still live, and the source's connection has
  not since announced a different definition for the tool). Otherwise the caller gets
  :class:`DefinitionChangedError` ("definition changed since approval").
- **Distinct outcomes.** Denied, expired, changed definition, withdrawn (shutdown) and refused
  (bound) are distinct errors (``reconciler/errors.py``), each with its own JSON-RPC code at
  the edge (``api/errors.py``).
- **Answered once.** The first decision wins; answering a request that is no longer pending is
  :class:`ApprovalStateError`. A parked call always ends with an answer: a decision, its
  expiry, or :meth:`withdraw_all` (SIGTERM), never silently dropped.
- **Standing approvals.** An approval may cover ``uses`` calls and/or a ``window_s`` window for
  the same (principal, tool, argument digest, definition digest): later matching calls run
  without parking while the cover lasts. The definition digest is part of the key, so a rug
  pull ends a cover too.

Who may answer is the edge's business (operator, or the session's owner: ``api/approvals.py``).
One event loop; every method but :meth:`wait` is synchronous and O(1) or O(parked)."""

from __future__ import annotations

import fnmatch
import itertools
import logging
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mcp_reconciler.reconciler import audit, telemetry
from mcp_reconciler.reconciler.digest import digest_json
from mcp_reconciler.reconciler.errors import (
    ApprovalDeniedError,
    ApprovalExpiredError,
    ApprovalLimitError,
    ApprovalStateError,
    ApprovalWithdrawnError,
)
from mcp_reconciler.reconciler.model import CatalogEntry

if TYPE_CHECKING:
    from mcp_reconciler.reconciler.pins import Pin
    from mcp_reconciler.reconciler.runtime import LiveGeneration

TIMEOUT_DEFAULT_S = 300.0
PARKED_MAX_DEFAULT = 64
PARKED_PER_PRINCIPAL_DEFAULT = 8
#: Decided requests kept for ``get``/``list`` after their call was answered.
RECENT_MAX = 256
#: Standing approvals (``uses``/``window_s``) kept at once; past it the oldest is dropped.
COVERS_MAX = 1024
#: A cover given with ``uses`` but no ``window_s`` lasts this long at most.
COVER_TTL_DEFAULT_S = 3600.0
COVER_WINDOW_MAX_S = 86_400.0
COVER_USES_MAX = 10_000
GLOBS_MAX = 256

log = logging.getLogger("mcp_reconciler.approvals")

State = Literal["pending", "approved", "denied", "expired", "withdrawn"]


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """The config's approval settings (``approvals:``): which served tool names need an approval
    (globs, matched case-sensitively), how long a call may wait, the parked-call bounds, and
    whether a calling client that supports elicitation is asked itself."""

    required: tuple[str, ...] = ()
    timeout_s: float = TIMEOUT_DEFAULT_S
    parked_max: int = PARKED_MAX_DEFAULT
    parked_per_principal: int = PARKED_PER_PRINCIPAL_DEFAULT
    elicitation: bool = True
    _match: Callable[[str], Any] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # One compiled pattern: the hot path pays one regex match, not one per glob.
        pattern = "|".join(fnmatch.translate(g) for g in self.required)
        object.__setattr__(self, "_match", re.compile(pattern).match if pattern else None)

    def requires(self, name: str, session_globs: tuple[str, ...] = ()) -> bool:
        """Whether calling the served tool ``name`` needs an approval under this policy or the
        session's own globs (O(1) when neither names anything)."""
        if self._match is not None and self._match(name) is not None:
            return True
        return any(fnmatch.fnmatchcase(name, g) for g in session_globs)


DEFAULT_POLICY = ApprovalPolicy()


def _check_globs(value: tuple[str, ...]) -> tuple[str, ...]:
    for glob in value:
        if not glob or len(glob) > 128:
            raise ValueError("approval globs are served tool names or globs of 1..128 characters")
    return value


class ApprovalConfig(BaseModel):
    """The top-level ``approvals:`` key: a list of served tool names or globs (shorthand for
    ``{required: [...]}``), or the mapping ``{required, timeout_s, parked_max,
    parked_per_principal, elicitation}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    required: tuple[str, ...] = Field(
        default=(),
        max_length=GLOBS_MAX,
        description="Served tool names or globs (`deploy_*`) whose calls wait for an approval (ADR 0034).",
    )
    timeout_s: float = Field(
        default=TIMEOUT_DEFAULT_S, gt=0, le=86_400, description="How long a call waits for an answer before it expires."
    )
    parked_max: int = Field(
        default=PARKED_MAX_DEFAULT, ge=1, le=100_000, description="Calls waiting for an approval at once, in total."
    )
    parked_per_principal: int = Field(
        default=PARKED_PER_PRINCIPAL_DEFAULT,
        ge=1,
        le=100_000,
        description="Calls waiting for an approval at once, per calling principal.",
    )
    elicitation: bool = Field(
        default=True,
        description="Also ask a calling client that supports form elicitation (2025-11-25 era) to approve.",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if value is None:
            return {}
        if isinstance(value, (list, tuple)):
            return {"required": value}
        return value

    @field_validator("required")
    @classmethod
    def _globs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _check_globs(value)

    def policy(self) -> ApprovalPolicy:
        """The engine's policy."""
        return ApprovalPolicy(
            required=self.required,
            timeout_s=self.timeout_s,
            parked_max=self.parked_max,
            parked_per_principal=self.parked_per_principal,
            elicitation=self.elicitation,
        )


def arguments_digest(arguments: Mapping[str, Any] | None) -> str:
    """sha256 of the canonical JSON of a call's arguments (``{}`` when there are none)."""
    return digest_json(dict(arguments or {}))


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One approval request as reported to those who may answer it (immutable; a decision
    makes a new one). Times are wall clock."""

    id: str
    principal: str
    session: str
    session_owner: str
    tool: str
    arguments_digest: str
    definition_digest: str
    revision: int
    requested_at: float
    expires_at: float
    state: State = "pending"
    decided_by: str | None = None
    uses: int = 1
    window_s: float = 0.0


def _audit(request: ApprovalRequest) -> None:
    """One audit record per approval request (``approval.requested``) and per settlement
    (``approval.approved`` / ``denied`` / ``expired`` / ``changed`` / ``withdrawn``), written here
    where every channel that answers (``/v1/approvals``, the CLI, the console, an elicitation,
    shutdown) passes; ``detail`` says who decided."""
    state = "requested" if request.state == "pending" else request.state
    audit.record(
        f"approval.{state}",
        principal=request.principal,
        session=request.session,
        name=request.tool,
        revision=request.revision,
        digest=request.definition_digest,
        args_sha256=request.arguments_digest,
        target=request.id,
        outcome=state,
        detail=request.decided_by,
    )


class Parked:
    """A call waiting for its approval: the request, the pin on the generation it resolved on,
    and the entry it resolved to. Made by :meth:`ApprovalRegistry.park` only."""

    __slots__ = ("_event", "deadline", "entry", "pin", "request", "why")

    def __init__(self, request: ApprovalRequest, pin: Pin, entry: CatalogEntry, deadline: float) -> None:
        self.request = request
        self.pin = pin
        self.entry = entry
        self.deadline = deadline  # anyio clock
        self.why = "the call was cancelled"  # why it was withdrawn, if it is
        self._event = anyio.Event()

    @property
    def live(self) -> LiveGeneration:
        """The generation the call parked on (pinned while it waits)."""
        return self.pin.live


@dataclass(slots=True)
class _Cover:
    uses_left: int
    until: float  # anyio clock


_CoverKey = tuple[str, str, str, str]  # principal, tool, arguments digest, definition digest
_ids = itertools.count(1)


def definition_kept(live: LiveGeneration, entry: CatalogEntry, current: LiveGeneration | None) -> bool:
    """Whether an approved call may still run on ``live`` as approved (I22): ``live`` has not
    closed, and the source's connection ``live`` would send it on has not since announced a
    different definition of the tool (or dropped it) in the ``current`` generation. A source
    that is now served by another connection leaves the pinned connection — and the definition
    it listed — in place for ``live``'s lifetime, so that is no change."""
    if live.is_closed:
        return False
    if current is None or current is live:
        return True
    pinned = live.generation.source_state(entry.source)
    now = current.generation.source_state(entry.source)
    if pinned is None or now is None or now.connection is not pinned.connection:
        return True
    for other in now.entries:
        if other.kind is entry.kind and other.upstream_name == entry.upstream_name:
            return other.digest == entry.digest
    return False


class ApprovalRegistry:
    """Parked calls, their approval requests, and standing approvals (module docstring)."""

    def __init__(self, policy: ApprovalPolicy = DEFAULT_POLICY, *, wall_clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self._wall = wall_clock
        self._parked: dict[str, Parked] = {}
        self._per_principal: dict[str, int] = {}
        self._recent: OrderedDict[str, ApprovalRequest] = OrderedDict()
        self._covers: OrderedDict[_CoverKey, _Cover] = OrderedDict()
        self._listeners: list[Callable[[ApprovalRequest], None]] = []
        self._closed: str | None = None

    # -- policy and reading ------------------------------------------------------------------

    def set_policy(self, policy: ApprovalPolicy) -> None:
        """Apply the config's settings; calls already parked keep their own expiry."""
        self.policy = policy

    def requires(self, name: str, session_globs: tuple[str, ...] = ()) -> bool:
        """Whether calling the served tool ``name`` needs an approval (:meth:`ApprovalPolicy.requires`)."""
        return self.policy.requires(name, session_globs)

    def add_listener(self, listener: Callable[[ApprovalRequest], None]) -> Callable[[], None]:
        """Call ``listener(request)`` synchronously when a request is made or answered; returns a remover."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def get(self, approval_id: str) -> ApprovalRequest | None:
        """The request ``approval_id``: pending, or decided recently (:data:`RECENT_MAX`)."""
        parked = self._parked.get(approval_id)
        return parked.request if parked is not None else self._recent.get(approval_id)

    def list(self) -> list[ApprovalRequest]:
        """Pending requests (oldest first), then recently decided ones (newest first)."""
        return [p.request for p in self._parked.values()] + list(reversed(self._recent.values()))

    @property
    def parked(self) -> int:
        """Calls parked now."""
        return len(self._parked)

    # -- the calling side --------------------------------------------------------------------

    def covered(self, principal: str, tool: str, args_digest: str, entry: CatalogEntry) -> bool:
        """Whether a standing approval covers this call; if so one of its uses is spent."""
        key = (principal, tool, args_digest, entry.digest)
        cover = self._covers.get(key)
        if cover is None:
            return False
        if cover.until <= anyio.current_time() or cover.uses_left <= 0:
            del self._covers[key]
            return False
        cover.uses_left -= 1
        if cover.uses_left <= 0:
            del self._covers[key]
        telemetry.approvals.add(1, {"outcome": "covered"})
        return True

    def park(
        self, *, principal: str, session: str, session_owner: str, tool: str, args_digest: str,
        live: LiveGeneration, entry: CatalogEntry,
    ) -> Parked:  # fmt: skip
        """Park one call that needs an approval: record its request and pin ``live``. Raises
        ApprovalLimitError past a bound, ApprovalWithdrawnError once :meth:`withdraw_all` ran,
        RevisionUnavailableError if ``live`` closed."""
        if self._closed is not None:
            raise ApprovalWithdrawnError("-", self._closed)
        policy = self.policy
        if len(self._parked) >= policy.parked_max:
            telemetry.approvals.add(1, {"outcome": "refused"})
            raise ApprovalLimitError(
                f"at most {policy.parked_max} calls may wait for an approval at once (approvals.parked_max); "
                "retry once some are answered"
            )
        # Counted per session owner: an owner's many sessions (or a session token, which is its
        # own principal) share one bound, so no owner can take the slots another needs.
        if self._per_principal.get(session_owner, 0) >= policy.parked_per_principal:
            telemetry.approvals.add(1, {"outcome": "refused"})
            raise ApprovalLimitError(
                f"a principal may have at most {policy.parked_per_principal} calls waiting for an approval "
                "(approvals.parked_per_principal); retry once some are answered"
            )
        pin = live.pin()
        now_wall = self._wall()
        request = ApprovalRequest(
            id=f"ap{next(_ids)}-{secrets.token_hex(4)}",
            principal=principal,
            session=session,
            session_owner=session_owner,
            tool=tool,
            arguments_digest=args_digest,
            definition_digest=entry.digest,
            revision=live.revision,
            requested_at=now_wall,
            expires_at=now_wall + policy.timeout_s,
        )
        parked = Parked(request, pin, entry, anyio.current_time() + policy.timeout_s)
        self._parked[request.id] = parked
        self._per_principal[session_owner] = self._per_principal.get(session_owner, 0) + 1
        telemetry.approvals.add(1, {"outcome": "requested"})
        telemetry.approvals_parked.add(1)
        _audit(request)
        self._tell(request)
        return parked

    async def wait(self, parked: Parked) -> ApprovalRequest:
        """Wait for ``parked``'s answer until its expiry and return the approved request; raises
        ApprovalDeniedError, ApprovalExpiredError or ApprovalWithdrawnError otherwise. The call
        is unparked on every exit path (cancellation included: it counts as withdrawn). The pin
        stays with the caller, who hands it to the operation or releases it."""
        try:
            with anyio.move_on_after(max(0.0, parked.deadline - anyio.current_time())):
                await parked._event.wait()
        finally:
            if parked.request.state == "pending":
                # Expired, or the caller went away (cancelled): either way it is answered here.
                why: State = "expired" if anyio.current_time() >= parked.deadline else "withdrawn"
                self._settle(parked, why, None)
        request = parked.request
        if request.state == "approved":
            return request
        if request.state == "denied":
            raise ApprovalDeniedError(request.id)
        if request.state == "expired":
            raise ApprovalExpiredError(request.id, request.expires_at - request.requested_at)
        raise ApprovalWithdrawnError(request.id, parked.why)

    def changed(self, parked: Parked) -> None:
        """Count an approved call that did not run because its definition changed (I22)."""
        telemetry.approvals.add(1, {"outcome": "changed"})

    # -- the answering side ------------------------------------------------------------------

    def decide(
        self, approval_id: str, *, approve: bool, by: str, uses: int = 1, window_s: float = 0.0
    ) -> ApprovalRequest:
        """Answer the pending request ``approval_id`` (first answer wins). ``uses`` > 1 or
        ``window_s`` > 0 also leave a standing approval for the same principal, tool, argument
        digest and definition digest. ApprovalStateError if it is not pending (or unknown)."""
        parked = self._parked.get(approval_id)
        if parked is None or parked.request.state != "pending":
            raise ApprovalStateError(f"approval {approval_id} is not waiting for an answer")
        uses = max(1, min(int(uses), COVER_USES_MAX))
        window_s = max(0.0, min(float(window_s), COVER_WINDOW_MAX_S))
        if approve and (uses > 1 or window_s > 0):
            r = parked.request
            ttl = window_s if window_s > 0 else COVER_TTL_DEFAULT_S
            left = uses - 1 if uses > 1 else COVER_USES_MAX  # a window alone: any number within it
            self._covers[(r.principal, r.tool, r.arguments_digest, r.definition_digest)] = _Cover(
                left, anyio.current_time() + ttl
            )
            while len(self._covers) > COVERS_MAX:
                self._covers.popitem(last=False)
        parked.request = replace(parked.request, uses=uses, window_s=window_s)
        return self._settle(parked, "approved" if approve else "denied", by)

    def withdraw_all(self, why: str) -> int:
        """Answer every parked call with ApprovalWithdrawnError(``why``) and refuse new ones
        (a graceful stop: parked calls are answered, never lost); returns how many there were."""
        self._closed = why
        parked = list(self._parked.values())
        for p in parked:
            p.why = why
            self._settle(p, "withdrawn", None)
        return len(parked)

    def withdraw_session(self, session_id: str, why: str) -> None:
        """Answer the calls parked by ``session_id`` (it was deleted) with ApprovalWithdrawnError."""
        for p in [p for p in self._parked.values() if p.request.session == session_id]:
            p.why = why
            self._settle(p, "withdrawn", None)

    # -- internals ---------------------------------------------------------------------------

    def _settle(self, parked: Parked, state: State, by: str | None) -> ApprovalRequest:
        request = replace(parked.request, state=state, decided_by=by)
        parked.request = request
        if self._parked.pop(request.id, None) is not None:
            n = self._per_principal.get(request.session_owner, 1) - 1
            if n <= 0:
                self._per_principal.pop(request.session_owner, None)
            else:
                self._per_principal[request.session_owner] = n
            telemetry.approvals_parked.add(-1)
        self._recent[request.id] = request
        while len(self._recent) > RECENT_MAX:
            self._recent.popitem(last=False)
        telemetry.approvals.add(1, {"outcome": state})
        _audit(request)
        parked._event.set()
        self._tell(request)
        return request

    def _tell(self, request: ApprovalRequest) -> None:
        for listener in list(self._listeners):
            try:
                listener(request)
            except Exception:  # a listener must not break an approval
                log.exception("approval listener failed")
