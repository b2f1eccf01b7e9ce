"""Async client for the mcp-reconciler control API, plus revision-pinned MCP runs.

    async with ReconcilerClient("http://127.0.0.1:8765", token=OPERATOR_TOKEN) as rc:
        status = await rc.status()
        async with rc.pinned() as run:          # hold the current revision for this run
            tools = await run.mcp.list_tools()  # every request carries the pinned revision
            await run.mcp.call_tool("notes__count_notes", {})

Retries: only idempotent requests (GET, DELETE) are retried, on connection failures and 503,
with a short backoff. POSTs are never retried automatically."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from pydantic import BaseModel

from api import wire
from sdk.errors import ReconcilerAPIError, Unreachable, error_for

M = TypeVar("M", bound=BaseModel)

REVISION_HEADER = "MCP-Reconciler-Revision"
REVISION_META = "io.mcp-reconciler/revision"


@dataclass
class PinnedRun:
    """An MCP client whose every request is served by ``revision`` (held live by ``hold``)."""

    mcp: Client
    revision: int
    hold: wire.HoldOut


class ReconcilerClient:
    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8765",
        token: str | None = None,
        *,
        timeout_s: float = 30.0,
        retries: int = 2,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.retries = retries
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx2.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout_s, transport=transport, trust_env=False
        )

    async def __aenter__(self) -> ReconcilerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- plumbing ----------------------------------------------------------------------------

    async def _request(
        self, method: str, path: str, *, json: Any = None, params: Any = None, request_timeout_s: float | None = None
    ) -> httpx2.Response:
        attempts = 1 + (self.retries if method in ("GET", "DELETE") else 0)
        last: ReconcilerAPIError | None = None
        for attempt in range(attempts):
            if attempt:
                await anyio.sleep(0.2 * 2**attempt)
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

    async def healthz(self) -> bool:
        response = await self._http.get("/healthz")
        return response.status_code == 200

    async def readyz(self) -> wire.ReadyOut:
        response = await self._http.get("/readyz")
        return wire.ReadyOut.model_validate(response.json())

    async def status(self) -> wire.StatusOut:
        return await self._get("/v1/status", wire.StatusOut)

    async def refresh(
        self, sources: Sequence[str] | None = None, *, wait: bool = True, timeout_s: float = 30.0
    ) -> wire.RefreshOut | wire.RefreshAccepted:
        body = {"sources": list(sources) if sources else None, "wait": wait, "timeout_s": timeout_s}
        response = await self._request("POST", "/v1/refresh", json=body, request_timeout_s=timeout_s + 10)
        if response.status_code == 202:
            return wire.RefreshAccepted.model_validate(response.json())
        return wire.RefreshOut.model_validate(response.json())

    async def generations(self) -> wire.GenerationsOut:
        return await self._get("/v1/generations", wire.GenerationsOut)

    async def catalog(self, revision: int | None = None) -> wire.CatalogOut:
        return await self._get("/v1/catalog", wire.CatalogOut, revision=revision)

    async def sources(self) -> list[wire.SourceOut]:
        response = await self._request("GET", "/v1/sources")
        return [wire.SourceOut.model_validate(s) for s in response.json()]

    async def source(self, name: str) -> wire.SourceOut:
        return await self._get(f"/v1/sources/{name}", wire.SourceOut)

    async def create_session(
        self,
        *,
        owner: str | None = None,
        grant_policy: Literal["current", "none", "explicit"] = "current",
        names: Sequence[str] = (),
        revision: int | None = None,
    ) -> wire.SessionCreated:
        body = {"owner": owner, "grant_policy": grant_policy, "names": list(names), "revision": revision}
        response = await self._request("POST", "/v1/sessions", json=body)
        return wire.SessionCreated.model_validate(response.json())

    async def sessions(self) -> list[wire.SessionOut]:
        return (await self._get("/v1/sessions", wire.SessionsOut)).sessions

    async def session(self, session_id: str) -> wire.SessionOut:
        return await self._get(f"/v1/sessions/{session_id}", wire.SessionOut)

    async def delete_session(self, session_id: str) -> None:
        await self._request("DELETE", f"/v1/sessions/{session_id}")

    async def refresh_session(self, session_id: str) -> wire.SessionRefreshOut:
        response = await self._request("POST", f"/v1/sessions/{session_id}/refresh", request_timeout_s=60)
        return wire.SessionRefreshOut.model_validate(response.json())

    async def grant(self, session_id: str, names: Sequence[str]) -> wire.GrantsOut:
        response = await self._request("POST", f"/v1/sessions/{session_id}/grants", json={"names": list(names)})
        return wire.GrantsOut.model_validate(response.json())

    async def hold(self, revision: int, *, ttl_s: float = 600.0) -> wire.HoldOut:
        response = await self._request("POST", f"/v1/revisions/{revision}/holds", json={"ttl_s": ttl_s})
        return wire.HoldOut.model_validate(response.json())

    async def release_hold(self, hold_id: str) -> None:
        await self._request("DELETE", f"/v1/holds/{hold_id}")

    # -- revision-pinned MCP runs --------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def pinned(
        self,
        revision: int | None = None,
        *,
        ttl_s: float = 600.0,
        session_token: str | None = None,
        mode: str = "auto",
    ) -> AsyncIterator[PinnedRun]:
        """Hold ``revision`` (default: the current one) for the run and yield an MCP client whose
        every request carries it, so the whole run sees one consistent catalog even while the
        gateway publishes newer revisions. The hold is released on exit, whatever happened."""
        if revision is None:
            revision = (await self.status()).revision
            if revision is None:
                raise error_for(503, "starting", "the gateway has not published a generation yet")
        hold = await self.hold(revision, ttl_s=ttl_s)
        try:
            headers = {REVISION_HEADER: str(revision)}
            if session_token:
                headers["Authorization"] = f"Bearer {session_token}"
            http = create_mcp_http_client(headers=headers)
            async with http, Client(streamable_http_client(f"{self.base_url}/mcp", http_client=http), mode=mode) as mcp:
                yield PinnedRun(mcp=mcp, revision=revision, hold=hold)
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(ReconcilerAPIError):
                await self.release_hold(hold.id)


def _error(response: httpx2.Response) -> ReconcilerAPIError:
    try:
        body = response.json()
        err = body.get("error", {}) if isinstance(body, dict) else {}
        return error_for(
            response.status_code, str(err.get("code", "")), str(err.get("message", response.reason_phrase))
        )
    except ValueError:
        return error_for(response.status_code, "", response.reason_phrase or f"HTTP {response.status_code}")
