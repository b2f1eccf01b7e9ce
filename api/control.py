"""The control API's handlers: JSON over HTTP under ``/v1`` (operators and session owners).

Each handler authenticates, validates its input against the wire models (``sdk/wire.py``) and
talks to the engine facade (``reconciler/engine.py``) — never to the reconciler, its queue or
its runtime — and to the front door for session notifications. Handlers raise
:class:`~mcp_reconciler.api.errors.ApiError`; the route table and the glue that turns errors into
``{"error": {"code", "message"}}`` answers (sanitized, I12) are in ``api/routes.py``.

It is over 400 lines because it holds one handler per ``/v1`` operation, and each handler with
a cluster store configured also commits its change there before it answers (ADR 0020); splitting
the handlers by resource would scatter the one authentication and validation path they share."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcp_reconciler.api.approvals import ApprovalsApi
from mcp_reconciler.api.auth import PRINCIPAL_KEY, Authenticator, Principal
from mcp_reconciler.api.errors import ApiError
from mcp_reconciler.api.events import EventStream
from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.views import owner_view, quarantined_names, status_out
from mcp_reconciler.reconciler import audit
from mcp_reconciler.reconciler.authority import GrantPolicy, Session, principal_id
from mcp_reconciler.reconciler.engine import Engine
from mcp_reconciler.reconciler.errors import (
    ClusterConflictError,
    ClusterUnavailableError,
    GrantError,
    GrantLimitError,
    HoldError,
    HoldLimitError,
    HoldSlotsError,
    QuotaError,
    RevisionUnavailableError,
)
from mcp_reconciler.reconciler.holds import HoldRegistry
from mcp_reconciler.reconciler.runtime import LiveGeneration
from mcp_reconciler.reconciler.workqueue import ALL
from mcp_reconciler.sdk import wire

MAX_BODY_BYTES = 256 * 1024
_INT = re.compile(r"-?[0-9]{1,18}")


@dataclass
class Control:
    """The ``/v1`` handlers over the engine facade (refresh, status, generations, sessions,
    holds) and the front door (session notifications). Every handler authenticates first."""

    engine: Engine
    front: FrontDoor
    auth: Authenticator
    events: EventStream = field(init=False)  # GET /v1/events (api/events.py); its bounds are attributes
    approvals: ApprovalsApi = field(init=False)  # /v1/approvals (api/approvals.py, ADR 0034)

    def __post_init__(self) -> None:
        self.events = EventStream(self.engine, self.auth)
        self.approvals = ApprovalsApi(self)

    @property
    def holds(self) -> HoldRegistry:
        """The engine's revision holds."""
        return self.engine.holds

    # -- plumbing ----------------------------------------------------------------------------

    def principal(self, request: Request) -> Principal:
        """The authenticated caller (an access token the OAuth edge accepted, else a static
        token); ApiError 401 without a valid bearer token."""
        found = request.scope.get(PRINCIPAL_KEY)
        if isinstance(found, Principal):
            return found
        principal = self.auth.authenticate(request.headers.get("authorization"))
        if principal is None:
            raise ApiError(401, "unauthenticated", "a valid bearer token is required (Authorization: Bearer …)")
        return principal

    @staticmethod
    def operator_only(principal: Principal) -> None:
        """ApiError 403 unless ``principal`` is an operator."""
        if principal.role != "operator":
            raise ApiError(403, "forbidden", "this endpoint needs the operator role")

    async def body(self, request: Request, model: type[BaseModel], *, optional: bool = False) -> Any:
        """``model`` parsed from the request body (at most ``MAX_BODY_BYTES``: else 413). An empty body is
        ``model()`` when ``optional``, else 400; a body that does not validate is 422 naming the first error."""
        raw = await request.body()
        if len(raw) > MAX_BODY_BYTES:
            raise ApiError(413, "body_too_large", f"request bodies are limited to {MAX_BODY_BYTES} bytes")
        if not raw.strip():
            if optional:
                return model()
            raise ApiError(400, "invalid_body", "a JSON body is required")
        try:
            return model.model_validate_json(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            raise ApiError(422, "invalid_body", f"{where}: {first['msg']}") from None

    def session_for(self, principal: Principal, session_id: str) -> Session:
        """The session ``session_id`` if ``principal`` may see it (operators: any; owners: their own);
        otherwise ApiError 404, so another owner's session ids do not leak."""
        session = self.engine.sessions.get(session_id)
        # By role-qualified id: an owner named like an operator is still not that operator.
        if session is None or (principal.role != "operator" and session.owner != principal.id):
            raise ApiError(404, "not_found", "no such session")  # another owner's session is "not found"
        return session

    @staticmethod
    def int_param(request: Request, name: str) -> int:
        """Path or query parameter ``name`` as an int: plain ASCII decimal of at most 18 digits, else ApiError 400."""
        raw = request.path_params.get(name) if name in request.path_params else request.query_params.get(name)
        # Plain ASCII decimal only: int() would also take "1_0", " 1", "+1" or non-ASCII digits.
        if not isinstance(raw, str) or _INT.fullmatch(raw) is None:
            raise ApiError(400, "invalid_parameter", f"{name} must be an integer")
        return int(raw)

    def session_out(self, session: Session, cls: type[wire.SessionOut] = wire.SessionOut, **extra: Any) -> Any:
        """``session`` as ``cls`` (``SessionOut`` or a subclass, with ``extra`` fields), listing at most
        1000 names; the token only if ``extra`` carries it."""
        names = sorted(k.partition(":")[2] for k in session.grants)
        sessions = self.engine.sessions
        return cls(
            id=session.id,
            owner=session.owner,
            created_at=session.created_at,
            pinned_revision=session.pinned_revision,
            granted=len(names),
            names=names[:1000],
            drifted=sorted(k.partition(":")[2] for k in session.drift_seen),
            grant_policy=session.policy.value,
            sources=sorted(session.standing.sources)
            if session.standing is not None and session.standing.sources is not None
            else None,
            declared=session.declared is not None,
            quarantined=quarantined_names(session, self.engine),
            last_active_at=session.last_active_at,
            view=session.view,
            discovery="search" if self.engine.sessions.searching(session) else "all",
            found=list(session.found),
            expires_at=sessions.expires_at(session),
            in_use=sessions.expires(session) and sessions.expires_at(session) is None,
            **extra,
        )

    async def status_model(self, principal: Principal | None = None) -> wire.StatusOut:
        """Status as ``principal`` may read it: operators everything, everyone else the
        owner view (no config paths; ``api/views.py::owner_view``)."""
        out = status_out(await self.engine.status())
        cluster = self.engine.cluster_status()
        if cluster is not None:
            out = out.model_copy(
                update={
                    "cluster": wire.ClusterOut(
                        replica_id=cluster.replica_id,
                        store=cluster.store,
                        healthy=cluster.healthy,
                        members=list(cluster.members),
                        ledger_revision=cluster.ledger_revision,
                        ledger_digest=cluster.ledger_digest,
                        diverged=cluster.diverged,
                        last_error=cluster.last_error,
                        difference=list(cluster.difference),
                    )
                }
            )
        trail = audit.current()
        if trail is not None:
            out = out.model_copy(update={"audit": wire.AuditOut(**trail.status())})
        return out if principal is None or principal.role == "operator" else owner_view(out)

    async def commit(self, session_id: str) -> None:
        """Clustered: answer only once the change is in the cluster store (503 when it cannot
        be reached; 409 when another replica changed the session first)."""
        try:
            await self.engine.commit_session(session_id)
        except ClusterConflictError as exc:
            raise ApiError(409, exc.code, str(exc)) from None
        except QuotaError as exc:
            raise ApiError.quota(exc) from None
        except GrantError as exc:
            raise ApiError(422, exc.code, str(exc)) from None

    # -- handlers ----------------------------------------------------------------------------

    async def get_status(self, request: Request) -> Response:
        """``GET /v1/status`` for any authenticated caller (owners get the owner view)."""
        principal = self.principal(request)
        return JSONResponse(wire.dump(await self.status_model(principal)))

    async def post_refresh(self, request: Request) -> Response:
        """``POST /v1/refresh`` (operators): queue the sources (default: all); 202 with a ticket when not
        waiting, else the outcome of the first cycle that starts afterwards (504 after ``timeout_s``).
        404 for an unknown source."""
        self.operator_only(self.principal(request))
        body: wire.RefreshIn = await self.body(request, wire.RefreshIn, optional=True)
        keys = body.sources or [ALL]
        if body.sources:
            known = self.engine.source_names()
            unknown = [s for s in body.sources if s not in known]
            if unknown:
                raise ApiError(404, "unknown_source", f"no such source: {', '.join(unknown[:5])}")
        ticket = await self.engine.submit(keys)
        if not body.wait:
            accepted = wire.RefreshAccepted(ticket=ticket.seq, revision=self.engine.current_revision)
            return JSONResponse(wire.dump(accepted), status_code=202)
        async with anyio.create_task_group() as tg:
            # Clustered: the other live replicas run their cycles meanwhile (each its own sources).
            replicas: list[Any] = []

            async def peers() -> None:
                try:
                    replicas.append(await self.engine.refresh_replicas(body.timeout_s))
                except ClusterUnavailableError as exc:
                    replicas.append(exc)

            if self.engine.clustered:
                tg.start_soon(peers)
            outcome = None
            with anyio.move_on_after(body.timeout_s):
                outcome = await ticket.wait()
            if outcome is None:
                tg.cancel_scope.cancel()  # raised below, outside the group: a plain 504, never a group
        if outcome is None:
            raise ApiError(504, "refresh_timeout", f"no reconcile cycle finished within {body.timeout_s:g} s")
        peer = replicas[0] if replicas else None
        if isinstance(peer, ClusterUnavailableError):
            raise ApiError(
                503,
                peer.code,
                f"this replica ran its cycle (revision {outcome.revision}); the other replicas could not be asked: "
                "the cluster store is unreachable",
            )
        out = wire.RefreshOut(
            revision=outcome.revision,
            changed=outcome.changed,
            cycle=outcome.seq,
            cycle_status=outcome.status,
            error=outcome.error,
            status=await self.status_model(),
            replicas_done=list(peer.done) if peer is not None else None,
            replicas_pending=list(peer.pending) if peer is not None else None,
        )
        return JSONResponse(wire.dump(out))

    async def get_generations(self, request: Request) -> Response:
        """``GET /v1/generations``: every live revision (current first) with its pins, entry count,
        trigger, drain deadline and holds (an owner sees only its own holds)."""
        principal = self.principal(request)
        engine = self.engine
        current = engine.current
        gens = []
        holds = [
            h for h in self.holds.list() if principal.role == "operator" or h.owner == principal.id
        ]  # another owner's holds are not "found" (like DELETE /v1/holds/{id})
        now, wall = anyio.current_time(), time.time()
        for live in engine.live():
            g = live.generation
            deadline_at = None
            if live is not current and live.drain_deadline is not None:
                deadline = max(live.drain_deadline, live.hold_until + engine.bounds.drain_grace_s)
                deadline_at = wall + (deadline - now)
            gens.append(
                wire.GenerationOut(
                    revision=g.revision,
                    digest=g.digest,
                    built_at=g.built_at,
                    published_at=g.published_at,
                    state="current" if live is current else "retiring",
                    pins=live.pins,
                    entries=g.catalog.entry_count,
                    stale_sources=list(g.catalog.stale_sources),
                    trigger=wire.TriggerOut(reasons=list(g.trigger.reasons), keys=list(g.trigger.keys)),
                    operations=live.operations,
                    superseded_at=live.superseded_at,
                    drain_deadline_at=deadline_at,
                    holds=[
                        wire.HoldRefOut(id=h.id, owner=h.owner, expires_at=h.expires_at)
                        for h in holds
                        if h.revision == g.revision
                    ],
                )
            )
        out = wire.GenerationsOut(
            current=current.revision if current is not None else None,
            generations=gens,
            pending_publication=engine.pending_publication,
        )
        return JSONResponse(wire.dump(out))

    async def get_catalog(self, request: Request) -> Response:
        """``GET /v1/catalog[?revision=n]``: every entry of that live revision (404 if not live) or of the
        current one (503 before the first publication)."""
        self.principal(request)
        live: LiveGeneration | None
        if "revision" in request.query_params:
            try:
                live = self.engine.get(self.int_param(request, "revision"))
            except RevisionUnavailableError as exc:
                raise ApiError(503 if exc.retryable else 404, exc.code, str(exc)) from None
        else:
            live = self.engine.current
            if live is None:
                raise ApiError(503, "starting", "no generation is published yet")
        g = live.generation
        entries = [
            wire.EntryOut(
                kind=e.kind.value, name=e.exposed_name, upstream_name=e.upstream_name, source=e.source, digest=e.digest
            )
            for table in g.routes.values()
            for e in table.values()
        ]
        return JSONResponse(wire.dump(wire.CatalogOut(revision=g.revision, digest=g.digest, entries=entries)))

    async def get_sources(self, request: Request) -> Response:
        """``GET /v1/sources``: every source's live state, as the caller may read it."""
        status = await self.status_model(self.principal(request))
        return JSONResponse([wire.dump(s) for s in status.sources])

    async def get_source(self, request: Request) -> Response:
        """``GET /v1/sources/{name}``: one source's live state; 404 if there is no such source."""
        principal = self.principal(request)
        name = request.path_params["name"]
        for s in (await self.status_model(principal)).sources:
            if s.name == name:
                return JSONResponse(wire.dump(s))
        raise ApiError(404, "unknown_source", "no such source")

    async def post_session(self, request: Request) -> Response:
        """``POST /v1/sessions``: create a session for the caller (operators may name an owner and grant
        the control tools) at the current or a given live revision (409 if not live). 201 with the
        token, shown only here; 422 for an invalid policy or name, 429 at the session bound."""
        principal = self.principal(request)
        body: wire.SessionIn = await self.body(request, wire.SessionIn, optional=True)
        if principal.role != "operator":
            owner = principal.id  # owners cannot choose the owner
            if body.control_tools:
                raise ApiError(403, "forbidden", "only operators may give a session the control tools")
        else:
            owner = principal_id("owner", body.owner) if body.owner else principal.id
        policy = GrantPolicy(body.grant_policy)
        if body.names and policy is not GrantPolicy.EXPLICIT:
            raise ApiError(422, "invalid_body", "names: only with grant_policy explicit")
        if body.sources and policy is not GrantPolicy.FOLLOW:
            raise ApiError(422, "invalid_body", "sources: only with grant_policy follow")
        if body.sources:
            known = self.engine.source_names()
            unknown = [s for s in body.sources if s not in known]
            if unknown:
                raise ApiError(422, "unknown_source", f"no such source: {', '.join(unknown[:5])}")
        try:
            live = self.engine.get(body.revision) if body.revision is not None else self.engine.current
        except RevisionUnavailableError as exc:
            raise ApiError(409, exc.code, str(exc)) from None
        gen = live.generation if live is not None else None
        if body.view is not None and (gen is None or body.view not in gen.catalog.views):
            raise ApiError(422, "unknown_view", "no such view (declare it under views: in the config)")
        self.engine.require_writable()
        try:
            session = self.engine.sessions.create(
                owner,
                gen,
                policy=policy,
                names=body.names,
                sources=body.sources,
                control_tools=body.control_tools,
                shared=self.engine.clustered,
                view=body.view,
                discovery=body.discovery,
                operator=principal.role == "operator",
            )
        except QuotaError as exc:  # the session quota, or more names than a session may hold
            raise ApiError.quota(exc) from None
        except GrantError as exc:
            raise ApiError(422, exc.code, str(exc)) from None
        session.pinned_revision = body.revision
        await self.commit(session.id)
        out = self.session_out(session, wire.SessionCreated, token=session.token)
        return JSONResponse(wire.dump(out), status_code=201)

    async def get_sessions(self, request: Request) -> Response:
        """``GET /v1/sessions``: the caller's sessions (every session for an operator)."""
        principal = self.principal(request)
        sessions = [
            s for s in self.engine.sessions.sessions() if principal.role == "operator" or s.owner == principal.id
        ]
        return JSONResponse(wire.dump(wire.SessionsOut(sessions=[self.session_out(s) for s in sessions])))

    async def get_session(self, request: Request) -> Response:
        """``GET /v1/sessions/{id}``: one session the caller may see, else 404."""
        session = self.session_for(self.principal(request), request.path_params["id"])
        return JSONResponse(wire.dump(self.session_out(session)))

    async def delete_session(self, request: Request) -> Response:
        """``DELETE /v1/sessions/{id}``: 204, and the session's token stops working on ``/mcp`` at once;
        409 for a session declared in the config, 404 if the caller may not see it."""
        session = self.session_for(self.principal(request), request.path_params["id"])
        if session.declared is not None:
            raise ApiError(
                409, "declared_session", "this session is declared in the config; remove it there and reload"
            )
        # The front door forgets the session's bindings through the authority's removal
        # listener: its token stops authenticating on /mcp at once.
        self.engine.require_writable()
        self.engine.sessions.remove(session.id)
        await self.commit(session.id)
        return Response(status_code=204)

    async def post_session_refresh(self, request: Request) -> Response:
        """``POST /v1/sessions/{id}/refresh``: under the session's lock, run a cycle (504 after the cycle
        timeout), then grant every name of the new current generation and notify the front door."""
        session = self.session_for(self.principal(request), request.path_params["id"])
        self.engine.require_writable()
        # Lock first, then reconcile: two refreshes of one session never interleave.
        async with session.lock:
            timeout_s = self.engine.bounds.cycle_timeout_s + 5
            try:
                outcome = await self.engine.refresh([ALL], timeout_s=timeout_s)
            except TimeoutError:
                raise ApiError(504, "refresh_timeout", f"no reconcile cycle finished within {timeout_s:g} s") from None
            live = self.engine.current
            if live is None:
                raise ApiError(503, "starting", "no generation is published yet")
            added = self.engine.sessions.grant_all_visible(session, live.generation)
            await self.commit(session.id)
        self.front.touch()
        out = wire.SessionRefreshOut(revision=outcome.revision, added=sorted(k.partition(":")[2] for k in added))
        return JSONResponse(wire.dump(out))

    async def post_grants(self, request: Request) -> Response:
        """``POST /v1/sessions/{id}/grants``: under the session's lock, grant the names (all or nothing,
        422 otherwise) from the current generation (503 before the first publication)."""
        session = self.session_for(self.principal(request), request.path_params["id"])
        body: wire.GrantsIn = await self.body(request, wire.GrantsIn)
        self.engine.require_writable()
        async with session.lock:
            live = self.engine.current
            if live is None:
                raise ApiError(503, "starting", "no generation is published yet")
            try:
                added = self.engine.sessions.grant(session, body.names, live.generation)
            except GrantLimitError as exc:
                raise ApiError.quota(exc) from None
            except GrantError as exc:
                raise ApiError(422, exc.code, str(exc)) from None
            await self.commit(session.id)
        self.front.touch()
        out = wire.GrantsOut(revision=live.revision, added=sorted(k.partition(":")[2] for k in added))
        return JSONResponse(wire.dump(out))

    async def post_revoke(self, request: Request) -> Response:
        """``POST /v1/sessions/{id}/revoke``: under the session's lock, take the names away (all or
        nothing, 422 otherwise: a name not granted, a session with a standing grant); 409 for a
        session declared in the config. Its MCP clients get ``list_changed``."""
        session = self.session_for(self.principal(request), request.path_params["id"])
        body: wire.GrantsIn = await self.body(request, wire.GrantsIn)
        if session.declared is not None:
            raise ApiError(
                409, "declared_session", "this session is declared in the config; change it there and reload"
            )
        self.engine.require_writable()
        async with session.lock:
            try:
                removed = self.engine.sessions.revoke(session, body.names)
            except GrantError as exc:
                raise ApiError(422, exc.code, str(exc)) from None
            await self.commit(session.id)
        self.front.touch()
        return JSONResponse(wire.dump(wire.RevokedOut(removed=sorted({k.partition(":")[2] for k in removed}))))

    async def post_hold(self, request: Request) -> Response:
        """``POST /v1/revisions/{n}/holds``: hold live revision ``n`` for the caller (201); 404 if not
        live, 429 over the hold bounds (owners also per owner), 422 for a TTL out of range."""
        principal = self.principal(request)
        revision = self.int_param(request, "n")
        body: wire.HoldIn = await self.body(request, wire.HoldIn, optional=True)
        try:
            info = await self.engine.create_hold(
                revision, body.ttl_s, owner=principal.id, operator=principal.role == "operator"
            )
        except RevisionUnavailableError as exc:
            raise ApiError(503 if exc.retryable else 404, exc.code, str(exc)) from None
        except HoldSlotsError as exc:  # not a quota: the retiring set's room (I5)
            raise ApiError(429, exc.code, str(exc)) from None
        except HoldLimitError as exc:
            raise ApiError.quota(exc) from None
        except HoldError as exc:
            raise ApiError(422, exc.code, str(exc)) from None
        digest = self.engine.get(info.revision).content_digest  # held: it is live
        out = wire.HoldOut(
            id=info.id,
            revision=info.revision,
            owner=info.owner,
            created_at=info.created_at,
            expires_at=info.expires_at,
            digest=digest,
        )
        return JSONResponse(wire.dump(out), status_code=201)

    async def delete_hold(self, request: Request) -> Response:
        """``DELETE /v1/holds/{id}``: release the hold (204); 404 unless it exists and the caller is an
        operator or its owner."""
        principal = self.principal(request)
        info = self.engine.get_hold(request.path_params["id"])
        if info is None or (principal.role != "operator" and info.owner != principal.id):
            raise ApiError(404, "not_found", "no such hold")
        await self.engine.release_hold(info.id)
        return Response(status_code=204)
