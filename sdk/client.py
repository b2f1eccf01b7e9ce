"""Async client for the mcp-reconciler control API, plus revision-pinned MCP runs.

    async with ReconcilerClient("http://127.0.0.1:8765", token=OPERATOR_TOKEN) as rc:
        status = await rc.status()
        async with rc.pinned() as run:          # hold the current revision for this run
            tools = await run.mcp.list_tools()  # every request carries the pinned revision
            await run.mcp.call_tool("notes__count_notes", {})

Retries: only idempotent requests (GET, DELETE) are retried, on connection failures and 503,
with a short exponential backoff (0.4 s, 0.8 s, ...; ``reconciler/backoff.py``, the formula the
engine uses too). POSTs are never retried automatically."""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import quote

import anyio
import httpx2
from pydantic import BaseModel

from mcp_reconciler.reconciler.backoff import exponential_delay
from mcp_reconciler.sdk import wire
from mcp_reconciler.sdk.auth import BearerAuth, TokenProvider
from mcp_reconciler.sdk.errors import NotFound, ReconcilerAPIError, Unreachable, error_for

if TYPE_CHECKING:  # the MCP client is imported when a pinned run starts: the CLI starts faster
    from mcp import Client

M = TypeVar("M", bound=BaseModel)

REVISION_HEADER = "MCP-Reconciler-Revision"
DIGEST_HEADER = "MCP-Reconciler-Digest"
RETRY_BASE_S = 0.4  # the first retry's delay; each further retry doubles it
REVISION_META = "io.mcp-reconciler/revision"


@dataclass
class PinnedRun:
    """An MCP client whose every request is served by ``revision`` (held live by ``hold``).
    ``session_id`` is the run's own gateway session when ``pinned()`` created one (no
    ``session_token`` given); it is deleted when the run ends."""

    mcp: Client
    revision: int
    hold: wire.HoldOut
    session_id: str | None = None


class ReconcilerClient:
    """The control-API client. ``token`` is a bearer token, or a token provider (a callable
    returning one, sync or async; see :mod:`sdk.auth`) asked on every request and once more
    after a 401, so short-lived tokens refresh without restarting a run."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8765",
        token: str | TokenProvider | None = None,
        *,
        timeout_s: float = 30.0,
        retries: int = 2,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.retries = retries
        headers = {"Authorization": f"Bearer {token}"} if isinstance(token, str) and token else {}
        auth = BearerAuth(token) if callable(token) else None
        self._http = httpx2.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout_s, transport=transport, trust_env=False, auth=auth
        )

    async def __aenter__(self) -> ReconcilerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client; the client cannot make requests afterwards."""
        await self._http.aclose()

    # -- plumbing ----------------------------------------------------------------------------

    async def _request(
        self, method: str, path: str, *, json: Any = None, params: Any = None, request_timeout_s: float | None = None
    ) -> httpx2.Response:
        attempts = 1 + (self.retries if method in ("GET", "DELETE") else 0)
        last: ReconcilerAPIError | None = None
        for attempt in range(attempts):
            if attempt:
                await anyio.sleep(exponential_delay(attempt, base_s=RETRY_BASE_S, cap_s=math.inf))
            try:
                kwargs: dict[str, Any] = {"json": json, "params": params}
                if request_timeout_s is not None:
                    kwargs["timeout"] = request_timeout_s
                response = await self._http.request(method, path, **kwargs)
            except httpx2.TransportError as exc:
                last = Unreachable(0, "unreachable", f"cannot reach {self.base_url}: {type(exc).__name__}")
                continue
            if response.status_code == 503 and attempt + 1 < attempts:
                last = _error(response)
                continue
            if response.status_code >= 400:
                raise _error(response)
            return response
        assert last is not None
        raise last

    async def _get(self, path: str, model: type[M], **params: Any) -> M:
        response = await self._request("GET", path, params={k: v for k, v in params.items() if v is not None} or None)
        return model.model_validate(response.json())

    # -- endpoints ---------------------------------------------------------------------------

    async def _probe(self, path: str) -> httpx2.Response:
        try:
            return await self._http.get(path)
        except httpx2.TransportError as exc:
            raise Unreachable(0, "unreachable", f"cannot reach {self.base_url}: {type(exc).__name__}") from None

    async def healthz(self) -> bool:
        """Whether the process answers ``/healthz``; :class:`Unreachable` if it cannot be reached."""
        return (await self._probe("/healthz")).status_code == 200

    async def readyz(self) -> wire.ReadyOut:
        """``/readyz`` (200 ready, 503 not ready: both answer a :class:`wire.ReadyOut`)."""
        response = await self._probe("/readyz")
        if response.status_code not in (200, 503):
            raise _error(response)
        return wire.ReadyOut.model_validate(response.json())

    async def status(self) -> wire.StatusOut:
        """``GET /v1/status`` as the caller may read it (owners see no config paths). Retried like every GET."""
        return await self._get("/v1/status", wire.StatusOut)

    async def refresh(
        self, sources: Sequence[str] | None = None, *, wait: bool = True, timeout_s: float = 30.0
    ) -> wire.RefreshOut | wire.RefreshAccepted:
        """``POST /v1/refresh`` (operators only; never retried). With ``wait``, the outcome of the first
        cycle that starts afterwards, or RefreshTimeout after ``timeout_s``; without, a 202 ticket.
        NotFound names an unknown source."""
        body = {"sources": list(sources) if sources else None, "wait": wait, "timeout_s": timeout_s}
        response = await self._request("POST", "/v1/refresh", json=body, request_timeout_s=timeout_s + 10)
        if response.status_code == 202:
            return wire.RefreshAccepted.model_validate(response.json())
        return wire.RefreshOut.model_validate(response.json())

    async def generations(self) -> wire.GenerationsOut:
        """``GET /v1/generations``: the current and retiring revisions with their pins."""
        return await self._get("/v1/generations", wire.GenerationsOut)

    async def catalog(self, revision: int | None = None) -> wire.CatalogOut:
        """``GET /v1/catalog``: every entry of ``revision`` (default: current). NotFound if that revision
        is not live; Unavailable before the first publication."""
        return await self._get("/v1/catalog", wire.CatalogOut, revision=revision)

    async def sources(self) -> list[wire.SourceOut]:
        """``GET /v1/sources``: every source's live state."""
        response = await self._request("GET", "/v1/sources")
        return [wire.SourceOut.model_validate(s) for s in response.json()]

    async def source(self, name: str) -> wire.SourceOut:
        """``GET /v1/sources/{name}``; NotFound if there is no such source."""
        return await self._get(f"/v1/sources/{_seg(name)}", wire.SourceOut)

    async def create_session(
        self,
        *,
        owner: str | None = None,
        grant_policy: Literal["current", "none", "explicit", "follow"] = "current",
        names: Sequence[str] = (),
        sources: Sequence[str] = (),
        revision: int | None = None,
        control_tools: bool = False,
        view: str | None = None,
        discovery: Literal["all", "search"] | None = None,
    ) -> wire.SessionCreated:
        """Create an agent session; its ``token`` (shown once) is its bearer token on ``/mcp``.
        ``names`` go with ``explicit``, ``sources`` with ``follow``; ``control_tools`` (operators
        only) lets it call the built-in control tools; ``view`` binds it to a named view (served
        at ``/mcp/<view>``: it sees and calls only that view's names); ``discovery="search"``
        gives it search mode (``find_tools`` and what it finds; ``None``: the view's or config's)."""
        body: dict[str, Any] = {
            "owner": owner,
            "grant_policy": grant_policy,
            "names": list(names),
            "revision": revision,
        }
        if sources:
            body["sources"] = list(sources)
        if control_tools:
            body["control_tools"] = True
        if view is not None:
            body["view"] = view
        if discovery is not None:
            body["discovery"] = discovery
        response = await self._request("POST", "/v1/sessions", json=body)
        return wire.SessionCreated.model_validate(response.json())

    async def sessions(self) -> list[wire.SessionOut]:
        """``GET /v1/sessions``: the caller's sessions (every session for an operator)."""
        return (await self._get("/v1/sessions", wire.SessionsOut)).sessions

    async def session(self, session_id: str) -> wire.SessionOut:
        """``GET /v1/sessions/{id}``; NotFound if it does not exist or belongs to another owner."""
        return await self._get(f"/v1/sessions/{_seg(session_id)}", wire.SessionOut)

    async def delete_session(self, session_id: str) -> None:
        """``DELETE /v1/sessions/{id}``: its token stops working on ``/mcp`` at once. NotFound as for
        :meth:`session`; Conflict for a session declared in the config."""
        await self._request("DELETE", f"/v1/sessions/{_seg(session_id)}")

    async def refresh_session(self, session_id: str) -> wire.SessionRefreshOut:
        """``POST /v1/sessions/{id}/refresh``: run a reconcile cycle, then grant the session every name
        of the new current generation; returns the names added or refreshed. RefreshTimeout if no
        cycle finished in time. Never retried."""
        response = await self._request("POST", f"/v1/sessions/{_seg(session_id)}/refresh", request_timeout_s=60)
        return wire.SessionRefreshOut.model_validate(response.json())

    async def grant(self, session_id: str, names: Sequence[str]) -> wire.GrantsOut:
        """``POST /v1/sessions/{id}/grants``: grant ``names`` from the current generation, all or
        nothing (re-granting a drifted name accepts its new definition); returns the names added or
        refreshed. InvalidRequest if a name is not in the catalog or the batch is over the bound."""
        response = await self._request("POST", f"/v1/sessions/{_seg(session_id)}/grants", json={"names": list(names)})
        return wire.GrantsOut.model_validate(response.json())

    async def revoke(self, session_id: str, names: Sequence[str]) -> wire.RevokedOut:
        """``POST /v1/sessions/{id}/revoke``: take granted ``names`` away, all or nothing. InvalidRequest
        if one is not granted or the session has a standing grant (follow); Conflict if declared."""
        response = await self._request("POST", f"/v1/sessions/{_seg(session_id)}/revoke", json={"names": list(names)})
        return wire.RevokedOut.model_validate(response.json())

    async def hold(self, revision: int, *, ttl_s: float = 600.0) -> wire.HoldOut:
        """``POST /v1/revisions/{revision}/holds``: keep ``revision`` live for ``ttl_s`` seconds. NotFound if
        it is not live, TooManyRequests over the hold bounds, InvalidRequest for a TTL out of range."""
        response = await self._request("POST", f"/v1/revisions/{revision}/holds", json={"ttl_s": ttl_s})
        return wire.HoldOut.model_validate(response.json())

    async def release_hold(self, hold_id: str) -> None:
        """``DELETE /v1/holds/{id}``; NotFound if no such hold is visible to the caller."""
        await self._request("DELETE", f"/v1/holds/{_seg(hold_id)}")

    # -- approvals (ADR 0034) ------------------------------------------------------------------

    async def approvals(self, *, pending: bool = False) -> list[wire.ApprovalOut]:
        """``GET /v1/approvals``: the requests the caller may answer (operators: all; owners: their
        sessions'), pending first; ``pending=True`` keeps only those still waiting."""
        found = (await self._get("/v1/approvals", wire.ApprovalsOut)).approvals
        return [a for a in found if a.state == "pending"] if pending else found

    async def approval(self, approval_id: str) -> wire.ApprovalOut:
        """``GET /v1/approvals/{id}``; NotFound unless the caller may answer it."""
        return await self._get(f"/v1/approvals/{_seg(approval_id)}", wire.ApprovalOut)

    async def approve(self, approval_id: str, *, uses: int = 1, window_s: float = 0.0) -> wire.ApprovalOut:
        """``POST /v1/approvals/{id}/approve``: the parked call runs on exactly the definition the
        request names, or fails with "definition changed since approval". ``uses``/``window_s``
        also cover later calls of the same principal, tool, arguments and definition. Conflict if
        it is no longer pending."""
        body = {"uses": uses, "window_s": window_s}
        response = await self._request("POST", f"/v1/approvals/{_seg(approval_id)}/approve", json=body)
        return wire.ApprovalOut.model_validate(response.json())

    async def deny(self, approval_id: str) -> wire.ApprovalOut:
        """``POST /v1/approvals/{id}/deny``: the parked call fails with ``approval_denied``."""
        response = await self._request("POST", f"/v1/approvals/{_seg(approval_id)}/deny")
        return wire.ApprovalOut.model_validate(response.json())

    async def set_session_approval(self, session_id: str, required: Sequence[str]) -> wire.SessionApprovalOut:
        """``PUT /v1/sessions/{id}/approval``: tool names or globs whose calls need an approval in
        that session (beside the config's); an owner may only add to them."""
        response = await self._request(
            "PUT", f"/v1/sessions/{_seg(session_id)}/approval", json={"required": list(required)}
        )
        return wire.SessionApprovalOut.model_validate(response.json())

    # -- revision-pinned MCP runs --------------------------------------------------------------

    async def _hold_for_run(self, revision: int | None, ttl_s: float) -> wire.HoldOut:
        """Hold ``revision``, or the current one: a publication between reading the current
        revision and holding it may retire it (404), so that case re-reads and retries (bounded)."""
        if revision is not None:
            return await self.hold(revision, ttl_s=ttl_s)
        for attempt in range(3):
            current = (await self.status()).revision
            if current is None:
                raise error_for(503, "starting", "the gateway has not published a generation yet")
            try:
                return await self.hold(current, ttl_s=ttl_s)
            except NotFound:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    @contextlib.asynccontextmanager
    async def pinned(
        self,
        revision: int | None = None,
        *,
        ttl_s: float = 600.0,
        session_token: str | TokenProvider | None = None,
        mode: str = "auto",
    ) -> AsyncIterator[PinnedRun]:
        """Hold ``revision`` (default: the current one) for the run and yield an MCP client whose
        every request carries it, so the whole run sees one consistent catalog even while the
        gateway publishes newer revisions. The hold is released on exit, whatever happened.

        ``session_token`` is the credential for ``/mcp`` (it needs one): a token, or a token
        provider asked per request (the run survives its refresh). Without one the run gets its
        own session (policy ``current`` at the held revision, pinned to it), deleted at the end."""
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        from mcp_reconciler.sdk.http_client import mcp_http_client

        hold = await self._hold_for_run(revision, ttl_s)
        revision = hold.revision
        raised: BaseException | None = None
        session_id: str | None = None
        try:
            if not session_token:
                created = await self.create_session(grant_policy="current", revision=revision)
                session_id, session_token = created.id, created.token
            headers = {REVISION_HEADER: str(revision)}
            if hold.digest:  # the catalog itself, not only its number: exact across replicas
                headers[DIGEST_HEADER] = hold.digest
            if isinstance(session_token, str) and session_token:
                headers["Authorization"] = f"Bearer {session_token}"
            auth = BearerAuth(session_token) if callable(session_token) else None
            http = mcp_http_client(headers=headers, auth=auth)
            async with http, Client(streamable_http_client(f"{self.base_url}/mcp", http_client=http), mode=mode) as mcp:
                try:
                    yield PinnedRun(mcp=mcp, revision=revision, hold=hold, session_id=session_id)
                except BaseException as exc:
                    raised = exc
                    raise
        except BaseExceptionGroup as group:
            # The MCP client's task groups wrap the body's own exception in exception groups;
            # give the caller back exactly what its code raised.
            if raised is not None and _only(group, raised):
                cause, context, suppress = raised.__cause__, raised.__context__, raised.__suppress_context__
                try:
                    raise raised  # the body's exception, with its own cause and context
                finally:
                    raised.__cause__, raised.__context__ = cause, context
                    raised.__suppress_context__ = suppress
            raise
        finally:
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(ReconcilerAPIError):
                    await self.release_hold(hold.id)
                if session_id is not None:
                    with contextlib.suppress(ReconcilerAPIError):
                        await self.delete_session(session_id)


def _only(group: BaseExceptionGroup[BaseException], exc: BaseException) -> bool:
    """Whether ``group`` (nested) holds nothing but ``exc``."""
    return all(_only(e, exc) if isinstance(e, BaseExceptionGroup) else e is exc for e in group.exceptions)


def _seg(value: str) -> str:
    """One URL path segment: ids and names are quoted, so ``/``, ``?`` or ``#`` in them cannot
    address another endpoint."""
    return quote(str(value), safe="")


def _error(response: httpx2.Response) -> ReconcilerAPIError:
    fallback = response.reason_phrase or f"HTTP {response.status_code}"
    try:
        body = response.json()
    except ValueError:
        return error_for(response.status_code, "", fallback)
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):  # not our error shape (a proxy, a load balancer)
        return error_for(response.status_code, "", fallback)
    return error_for(response.status_code, str(err.get("code", "")), str(err.get("message", fallback)))
