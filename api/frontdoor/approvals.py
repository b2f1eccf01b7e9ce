"""The approval gate: the one point where a forwarded tool call that needs an approval parks
(ADR 0034, I22).

:meth:`ApprovalGate.clear` runs inside ``Forwarder._forward`` after the exposed name resolved in
the chosen generation (and the upstream is connected) and before anything is sent upstream. A
call no policy names costs one regex match. A call that needs an approval and is not covered by
a standing approval parks in the engine's :class:`~reconciler.approvals.ApprovalRegistry` with a
pin on its generation; it is answered over ``/v1/approvals`` (``api/approvals.py``), the CLI, the
console — or, when the config allows it and the calling client declared form elicitation (2025-11-25
era), by that client: the gate sends it an ``elicitation/create`` naming the tool, the argument
and definition digests and the revision, and an ``accept`` with ``approve: true`` approves,
``decline`` (or ``approve: false``) denies, ``cancel`` leaves the request to the other channels.

Once approved, :func:`~reconciler.approvals.definition_kept` decides whether the call may still
run on the pinned generation as approved; if not, the caller gets "definition changed since
approval". The pin is returned to the forwarder, which holds it until the call has run."""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext

from mcp_reconciler.api.frontdoor import link
from mcp_reconciler.api.frontdoor.capabilities import missing_capability
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.sessions import Binding
from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.approvals import ApprovalRequest, Parked, arguments_digest, definition_kept
from mcp_reconciler.reconciler.errors import (
    ApprovalStateError,
    DefinitionChangedError,
    ReconcilerError,
    UpstreamUnavailableError,
)
from mcp_reconciler.reconciler.model import CatalogEntry
from mcp_reconciler.reconciler.pins import Pin
from mcp_reconciler.reconciler.runtime import LiveGeneration
from mcp_reconciler.reconciler.upstream import UpstreamConnection

log = logging.getLogger("mcp_reconciler.frontdoor")
_request_ids = itertools.count(1)

#: The form an approving client fills in: one boolean.
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve this call"}},
    "required": ["approve"],
}


class ApprovalGate:
    """Parks tool calls that need an approval until they are answered (module docstring)."""

    def __init__(self, catalog: CatalogAccess) -> None:
        self._catalog = catalog

    def needed(self, binding: Binding, name: str) -> bool:
        """Whether calling the served tool ``name`` in ``binding``'s session needs an approval."""
        return self._catalog.approvals.requires(name, binding.session.approval_required)

    async def clear(
        self,
        binding: Binding,
        ctx: ServerRequestContext[Any] | None,
        live: LiveGeneration,
        entry: CatalogEntry,
        name: str,
        arguments: Mapping[str, Any] | None,
        conn: UpstreamConnection,
    ) -> Pin | None:
        """Return once the call may run on ``live`` over ``conn``: ``None`` when it needs no
        approval or a standing approval covers it, else the pin that kept ``live`` while it
        waited (the caller releases it after the call). Raises the engine's approval errors
        (limit, denied, expired, withdrawn), DefinitionChangedError (I22), or
        UpstreamUnavailableError when the connection died while the call waited."""
        if not self.needed(binding, name):
            return None
        registry = self._catalog.approvals
        principal = binding.principal or binding.session.owner
        digest = arguments_digest(arguments)
        if registry.covered(principal, name, digest, entry):
            return None
        parked = registry.park(
            principal=principal,
            session=binding.session.id,
            session_owner=binding.session.owner,
            tool=name,
            args_digest=digest,
            live=live,
            entry=entry,
        )
        log.info(
            "approval %s: %s calls %s on revision %d; waiting up to %.0f s",
            parked.request.id, principal, name, live.revision, registry.policy.timeout_s,
        )  # fmt: skip
        try:
            with telemetry.tracer.start_as_current_span(
                "frontdoor.approval", attributes={"approval.id": parked.request.id, "mcp.tool": name}
            ) as span:
                request: ApprovalRequest | None = None
                failure: ReconcilerError | None = None
                async with anyio.create_task_group() as tg:
                    if registry.policy.elicitation and self._can_elicit(binding, ctx):
                        assert ctx is not None
                        tg.start_soon(self._elicit, ctx, parked)
                    try:
                        request = await registry.wait(parked)
                    except ReconcilerError as exc:  # raised outside the group: no exception group
                        failure = exc
                    finally:
                        tg.cancel_scope.cancel()  # the elicitation is moot once answered
                span.set_attribute("approval.state", parked.request.state)
                if failure is not None:
                    raise failure
                assert request is not None
                if not definition_kept(parked.live, parked.entry, self._catalog.current()):
                    registry.changed(parked)
                    span.set_attribute("approval.state", "changed")
                    raise DefinitionChangedError(request.id, name, request.revision)
                if not conn.alive:
                    raise UpstreamUnavailableError()
        except BaseException:
            parked.pin.release()
            raise
        return parked.pin

    @staticmethod
    def _can_elicit(binding: Binding, ctx: ServerRequestContext[Any] | None) -> bool:
        if binding.era != "legacy" or ctx is None:
            return False  # a 2026-07-28 client cannot receive a server→client request mid-call
        probe = types.ElicitRequest(params=types.ElicitRequestFormParams(message="", requested_schema=APPROVAL_SCHEMA))
        try:
            return missing_capability(ctx, probe) is None
        except Exception:
            return False

    async def _elicit(self, ctx: ServerRequestContext[Any], parked: Parked) -> None:
        """Ask the calling client to approve; a clear answer decides, anything else leaves the
        request to the other channels."""
        request = parked.request
        params = types.ElicitRequestFormParams(message=describe(request), requested_schema=APPROVAL_SCHEMA)
        opts: Any = {"request_id": f"gw-approval-{next(_request_ids)}"}
        try:
            raw = await link.ask_client(
                ctx, "elicitation/create", params.model_dump(by_alias=True, mode="json", exclude_none=True), opts
            )
            answer = types.ElicitResult.model_validate(raw, by_name=False)
        except Exception as exc:  # the client could not answer: the other channels still can
            log.info("approval %s: elicitation failed: %s", request.id, type(exc).__name__)
            return
        if answer.action == "cancel":
            return
        approve = answer.action == "accept" and bool((answer.content or {}).get("approve"))
        with contextlib.suppress(ApprovalStateError):  # answered on another channel first
            self._catalog.approvals.decide(request.id, approve=approve, by=f"{request.principal} (elicitation)")


def task_refused(name: str) -> MCPError:
    """A tool that needs an approval is never run as a task (tasks bypass the forwarding
    operation the approval hook sits in): the caller is told to call it plainly."""
    return MCPError(
        types.INVALID_REQUEST,
        f"{name} needs an approval: call it without a task (approvals and tasks do not combine)",
        {"code": "approval_needs_plain_call", "retryable": False},
    )


def describe(request: ApprovalRequest) -> str:
    """The text an approver reads: what would run, on which definition, until when."""
    return (
        f"Approve the call to {request.tool} by {request.principal} (session {request.session})? "
        f"arguments sha256 {request.arguments_digest}; definition sha256 {request.definition_digest} "
        f"at revision {request.revision}; approval {request.id} expires in "
        f"{request.expires_at - request.requested_at:.0f} s."
    )
