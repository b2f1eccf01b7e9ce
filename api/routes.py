"""The control API's route table and its HTTP glue.

Every ``/v1`` route is declared once in :data:`ROUTES` with its models; the same table builds the
Starlette routes (:func:`routes`) and the OpenAPI document (``api/openapi.py``). Every answer
that is not a handler's own is ``{"error": {"code", "message"}}``, with a bounded, sanitized
message (I12): handler errors (``ApiError``), engine errors (503 when retryable, else 409), bad
JSON (400), unknown paths (404) and methods (405, with ``Allow``), and anything unexpected (500,
details only in the operator log)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from mcp_reconciler.api.auth import PRINCIPAL_KEY, Principal
from mcp_reconciler.api.control import Control
from mcp_reconciler.api.errors import ApiError
from mcp_reconciler.api.ui import ui_routes
from mcp_reconciler.reconciler import audit
from mcp_reconciler.reconciler.errors import QuotaError, ReconcilerError
from mcp_reconciler.sdk import wire

log = logging.getLogger("mcp_reconciler.control")

EVENTS_PATH = "/v1/events"
MAX_MESSAGE_CHARS = 512  # error messages may quote the request (names, field paths): bounded (I12)


def _error(status: int, code: str, message: str, *, bound: str | None = None, limit: int | None = None) -> JSONResponse:
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 1] + "…"
    return JSONResponse(wire.error(code, message, bound=bound, limit=limit), status_code=status)


@dataclass(frozen=True)
class RouteSpec:
    """One ``/v1`` operation: method, path, the ``Control`` handler's name, and its models."""

    method: str
    path: str
    handler: str
    summary: str
    request: type[BaseModel] | None = None
    responses: tuple[tuple[int, type[BaseModel] | None], ...] = ()
    list_of: bool = False
    auth: bool = True
    part: str = ""  # the handler lives on ``control.<part>`` (e.g. ``approvals``), not on ``Control`` itself


ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec(
        "GET",
        "/v1/status",
        "get_status",
        "Provenance: revision, freshness, sources, warnings (I11)",
        responses=((200, wire.StatusOut),),
    ),
    RouteSpec(
        "POST",
        "/v1/refresh",
        "post_refresh",
        "Reconcile now; answered by a cycle that started after the request",
        request=wire.RefreshIn,
        responses=((200, wire.RefreshOut), (202, wire.RefreshAccepted)),
    ),
    RouteSpec(
        "GET",
        "/v1/generations",
        "get_generations",
        "Live generations (current and retiring)",
        responses=((200, wire.GenerationsOut),),
    ),
    RouteSpec(
        "GET",
        "/v1/catalog",
        "get_catalog",
        "Entries of a live revision (query: revision)",
        responses=((200, wire.CatalogOut),),
    ),
    RouteSpec(
        "GET",
        "/v1/sources",
        "get_sources",
        "Every source's live state",
        responses=((200, wire.SourceOut),),
        list_of=True,
    ),
    RouteSpec("GET", "/v1/sources/{name}", "get_source", "One source's live state", responses=((200, wire.SourceOut),)),
    RouteSpec(
        "POST",
        "/v1/sessions",
        "post_session",
        "Create an agent session (returns its MCP bearer token once)",
        request=wire.SessionIn,
        responses=((201, wire.SessionCreated),),
    ),
    RouteSpec(
        "GET", "/v1/sessions", "get_sessions", "Sessions visible to the caller", responses=((200, wire.SessionsOut),)
    ),
    RouteSpec("GET", "/v1/sessions/{id}", "get_session", "One session", responses=((200, wire.SessionOut),)),
    RouteSpec("DELETE", "/v1/sessions/{id}", "delete_session", "End a session", responses=((204, None),)),
    RouteSpec(
        "POST",
        "/v1/sessions/{id}/refresh",
        "post_session_refresh",
        "Reconcile, then grant the session every name now visible",
        responses=((200, wire.SessionRefreshOut),),
    ),
    RouteSpec(
        "POST",
        "/v1/sessions/{id}/grants",
        "post_grants",
        "Grant names to a session (all or nothing)",
        request=wire.GrantsIn,
        responses=((200, wire.GrantsOut),),
    ),
    RouteSpec(
        "POST",
        "/v1/sessions/{id}/revoke",
        "post_revoke",
        "Take granted names away from a session (all or nothing)",
        request=wire.GrantsIn,
        responses=((200, wire.RevokedOut),),
    ),
    RouteSpec(
        "POST",
        "/v1/revisions/{n}/holds",
        "post_hold",
        "Keep a revision live for a run (bounded TTL)",
        request=wire.HoldIn,
        responses=((201, wire.HoldOut),),
    ),
    RouteSpec("DELETE", "/v1/holds/{id}", "delete_hold", "Release a revision hold", responses=((204, None),)),
    RouteSpec(
        "GET",
        "/v1/approvals",
        "get_approvals",
        "Approval requests the caller may answer (pending first; ADR 0034)",
        responses=((200, wire.ApprovalsOut),),
        part="approvals",
    ),
    RouteSpec(
        "GET",
        "/v1/approvals/{id}",
        "get_approval",
        "One approval request",
        responses=((200, wire.ApprovalOut),),
        part="approvals",
    ),
    RouteSpec(
        "POST",
        "/v1/approvals/{id}/approve",
        "post_approve",
        "Approve a parked call: it runs on exactly the definition approved, or not at all (I22)",
        request=wire.ApprovalDecisionIn,
        responses=((200, wire.ApprovalOut),),
        part="approvals",
    ),
    RouteSpec(
        "POST",
        "/v1/approvals/{id}/deny",
        "post_deny",
        "Deny a parked call",
        responses=((200, wire.ApprovalOut),),
        part="approvals",
    ),
    RouteSpec(
        "GET",
        "/v1/sessions/{id}/approval",
        "get_session_approval",
        "A session's own approval globs",
        responses=((200, wire.SessionApprovalOut),),
        part="approvals",
    ),
    RouteSpec(
        "PUT",
        "/v1/sessions/{id}/approval",
        "put_session_approval",
        "Set a session's own approval globs (owners may only add)",
        request=wire.SessionApprovalIn,
        responses=((200, wire.SessionApprovalOut),),
        part="approvals",
    ),
)


def routes(control: Control) -> list[BaseRoute]:
    """Starlette routes for every entry of :data:`ROUTES` on ``control``, then a catch-all that
    answers unknown ``/v1`` paths and methods with a JSON error."""
    out: list[Route] = []
    for spec in ROUTES:
        handler: Callable[[Request], Awaitable[Response]] = getattr(
            getattr(control, spec.part) if spec.part else control, spec.handler
        )
        endpoint = _wrap(handler, AUDITED.get(spec.handler), control)
        out.append(Route(spec.path, endpoint=endpoint, methods=[spec.method]))
    # The event stream is an ASGI endpoint of its own (api/events.py: bounded, streaming); the
    # OpenAPI document describes it beside the table (api/openapi.py).
    out.append(Route(EVENTS_PATH, endpoint=control.events, methods=["GET"]))
    # Last: anything else under /v1 answers a JSON error too (never Starlette's plain-text 404/405,
    # nor a slash redirect that would turn "DELETE /v1/sessions/" into a request on the collection).
    unmatched = Route("/v1/{rest:path}", endpoint=_unmatched(list(out)), methods=_ANY_METHOD)
    # Starlette's ``path`` convertor is ``.*`` without DOTALL: a path holding a newline (``%0A``)
    # matched no route and got Starlette's plain-text 404. Every path under /v1 lands here.
    unmatched.path_regex = re.compile(r"^/v1/(?P<rest>.*)$", re.DOTALL)
    out.append(unmatched)
    # The operator console (api/ui/): a static page over this API, served beside it.
    return [*out, *ui_routes()]


_ANY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _unmatched(known: list[Route]) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        allowed = sorted(
            {m for route in known if route.path_regex.fullmatch(request.url.path) for m in route.methods or ()}
        )
        if allowed:
            response = _error(405, "method_not_allowed", f"allowed methods: {', '.join(allowed)}")
            response.headers["Allow"] = ", ".join(allowed)
            return response
        return _error(404, "no_such_endpoint", "no such control-API endpoint; see api/openapi.json")

    return endpoint


#: The control-API operations that change something, by handler, as their audit record kind.
AUDITED = {
    "post_refresh": "refresh",
    "post_session": "session.create",
    "delete_session": "session.delete",
    "post_session_refresh": "session.refresh",
    "post_grants": "session.grant",
    "post_revoke": "session.revoke",
    "post_hold": "hold.create",
    "delete_hold": "hold.release",
    "put_session_approval": "session.approval",
}


def _wrap(
    handler: Callable[[Request], Awaitable[Response]], kind: str | None = None, control: Control | None = None
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        response = await _answer(handler, request)
        if kind is not None or response.status_code == 401:
            _audit(kind, request, response, control)
        return response

    return endpoint


async def _answer(handler: Callable[[Request], Awaitable[Response]], request: Request) -> Response:
    try:
        return await handler(request)
    except ApiError as exc:
        return _error(exc.status, exc.code, exc.message, bound=exc.bound, limit=exc.limit)
    except QuotaError as exc:  # a quota (ADR 0032): 429 naming the bound and its config key
        return _error(429, exc.code, str(exc), bound=exc.bound or None, limit=exc.limit)
    except ReconcilerError as exc:
        return _error(503 if exc.retryable else 409, exc.code, str(exc))
    except json.JSONDecodeError:
        return _error(400, "invalid_body", "the body is not valid JSON")
    except Exception:
        log.exception("control API request failed: %s %s", request.method, request.url.path)
        return _error(500, "internal_error", "internal error; see the operator log")


def _audit(kind: str | None, request: Request, response: Response, control: Control | None) -> None:
    """One record per control-API change (and per refused credential), written here where every
    ``/v1`` request passes; the created session's id is read from the answer."""
    if not audit.enabled():
        return
    if response.status_code == 401:
        audit.record("credential.refused", reason="invalid", status=401, outcome="refused", detail="/v1")
        return
    principal = request.scope.get(PRINCIPAL_KEY)
    if principal is None and control is not None:
        principal = control.auth.authenticate(request.headers.get("authorization"))
    body: dict[str, object] = {}
    if isinstance(response, JSONResponse):
        try:
            loaded = json.loads(bytes(response.body))
            body = loaded if isinstance(loaded, dict) else {}
        except ValueError:
            body = {}
    error = body.get("error")
    params = request.path_params
    on_session = kind is not None and kind.startswith("session.")
    created = body.get("id") if kind in ("session.create", "hold.create") else None
    required = body.get("required")  # a session's approval globs: what was set is the record's point
    audit.record(
        kind or "control.request",
        principal=principal.id if isinstance(principal, Principal) else None,
        session=(params.get("id") or created) if on_session else None,
        target=None if on_session else params.get("id") or params.get("n") or created,
        revision=body.get("revision") if isinstance(body.get("revision"), int) else None,
        status=response.status_code,
        outcome="ok" if response.status_code < 400 else "error",
        error=error.get("code") if isinstance(error, dict) else None,
        detail=f"required={','.join(map(str, required))}" if isinstance(required, list) else None,
    )
