"""The control API's approval handlers: ``/v1/approvals`` and a session's own approval globs
(ADR 0034).

Grants are access control (I16), and so are approvals: a request is visible to, and may be
answered by, an operator or the owner of the session that made the call — nobody else. To
anyone else another owner's request does not exist (404, like another owner's session). The
first answer wins; answering a request that is no longer pending is 409 ``approval_not_pending``.
What an approval lets run is the definition it names, or nothing (I22, ``reconciler/approvals.py``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcp_reconciler.api.auth import Principal
from mcp_reconciler.api.errors import ApiError
from mcp_reconciler.reconciler.approvals import ApprovalRegistry, ApprovalRequest
from mcp_reconciler.reconciler.errors import ApprovalStateError
from mcp_reconciler.sdk import wire

if TYPE_CHECKING:
    from mcp_reconciler.api.control import Control


def approval_out(request: ApprovalRequest) -> wire.ApprovalOut:
    """``request`` as the wire model (every field but the session's owner, which decides who sees it)."""
    fields = {f.name: getattr(request, f.name) for f in dataclasses.fields(request) if f.name != "session_owner"}
    return wire.ApprovalOut.model_validate(fields)


@dataclass
class ApprovalsApi:
    """The approval handlers; authentication, bodies and session lookup are the control API's."""

    control: Control

    @property
    def registry(self) -> ApprovalRegistry:
        """The engine's approval registry."""
        return self.control.engine.approvals

    @staticmethod
    def may_answer(principal: Principal, request: ApprovalRequest) -> bool:
        """Operators answer every request; an owner those of its own sessions' calls."""
        return principal.role == "operator" or request.session_owner == principal.id

    def _visible(self, request: Request) -> tuple[Principal, ApprovalRequest]:
        principal = self.control.principal(request)
        found = self.registry.get(request.path_params["id"])
        if found is None or not self.may_answer(principal, found):
            raise ApiError(404, "not_found", "no such approval")
        return principal, found

    async def get_approvals(self, request: Request) -> Response:
        """``GET /v1/approvals``: the requests the caller may answer, pending first."""
        principal = self.control.principal(request)
        out = [approval_out(r) for r in self.registry.list() if self.may_answer(principal, r)]
        return JSONResponse(wire.dump(wire.ApprovalsOut(approvals=out)))

    async def get_approval(self, request: Request) -> Response:
        """``GET /v1/approvals/{id}``: one request (404 unless the caller may answer it)."""
        _, found = self._visible(request)
        return JSONResponse(wire.dump(approval_out(found)))

    async def post_approve(self, request: Request) -> Response:
        """``POST /v1/approvals/{id}/approve``: approve (optionally covering more calls, see
        ``ApprovalDecisionIn``); 409 if it is no longer pending."""
        principal, found = self._visible(request)
        body: wire.ApprovalDecisionIn = await self.control.body(request, wire.ApprovalDecisionIn, optional=True)
        return self._decide(found, principal, approve=True, uses=body.uses, window_s=body.window_s)

    async def post_deny(self, request: Request) -> Response:
        """``POST /v1/approvals/{id}/deny``: deny; 409 if it is no longer pending."""
        principal, found = self._visible(request)
        return self._decide(found, principal, approve=False)

    def _decide(
        self, found: ApprovalRequest, principal: Principal, *, approve: bool, uses: int = 1, window_s: float = 0.0
    ) -> Response:
        try:
            decided = self.registry.decide(found.id, approve=approve, by=principal.id, uses=uses, window_s=window_s)
        except ApprovalStateError as exc:
            raise ApiError(409, exc.code, str(exc)) from None
        return JSONResponse(wire.dump(approval_out(decided)))

    async def put_session_approval(self, request: Request) -> Response:
        """``PUT /v1/sessions/{id}/approval``: set the session's own approval globs (beside the
        config's). Operators may set any; an owner may only add (never lift an approval)."""
        principal = self.control.principal(request)
        session = self.control.session_for(principal, request.path_params["id"])
        body: wire.SessionApprovalIn = await self.control.body(request, wire.SessionApprovalIn)
        for glob in body.required:
            if not glob or len(glob) > 128:
                raise ApiError(422, "invalid_body", "required: served tool names or globs of 1..128 characters")
        wanted = tuple(dict.fromkeys(body.required))
        if principal.role != "operator" and not set(session.approval_required) <= set(wanted):
            raise ApiError(403, "forbidden", "an owner may add approval globs to a session, not remove them")
        session.approval_required = wanted
        return JSONResponse(wire.dump(wire.SessionApprovalOut(session=session.id, required=list(wanted))))

    async def get_session_approval(self, request: Request) -> Response:
        """``GET /v1/sessions/{id}/approval``: the session's own approval globs."""
        principal = self.control.principal(request)
        session = self.control.session_for(principal, request.path_params["id"])
        return JSONResponse(
            wire.dump(wire.SessionApprovalOut(session=session.id, required=list(session.approval_required)))
        )
