"""OAuth 2.1 client credentials for one HTTP upstream, as an ``httpx2.Auth``.

The gateway is a *client* of its upstreams, with credentials of its own per source: it never
forwards a downstream client's token (the MCP specification forbids token passthrough; a
client's token is minted for the gateway, and an upstream that accepted it would be a confused
deputy). :class:`ClientCredentialsAuth` obtains a token from the source's token endpoint
(``grant_type=client_credentials``, RFC 6749 §4.4, with RFC 8707 ``resource`` and an optional
``audience``), caches it, and sets ``Authorization: Bearer`` on every upstream request.

Renewal: a token is used until ``refresh_skew_s`` before it expires (the skew is capped at half
the token's lifetime, so a short-lived token is not refetched on every request); a token without
``expires_in`` is kept at most :data:`DEFAULT_LIFETIME_S`. An upstream 401 renews the token once
and replays the request (the token may have been revoked early). Concurrent requests share one
token request: the fetch runs under a lock, and a request that waited re-reads the token the
other one obtained.

The token request uses a short-lived client of its own (token requests are rare, and the
connection's client must not apply this auth to them), a total timeout and a byte cap on the
answer. Errors
are :class:`UpstreamAuthError`, whose message names the HTTP status and the RFC 6749 ``error``
code only — never the secret, the token or the endpoint's free text.

One instance per upstream connection (built by :mod:`reconciler.transports`): a reconnect
starts with a fresh token, which is also what a rotated secret needs. No HTTP framework here,
only the HTTP client the MCP SDK already uses."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any
from urllib.parse import quote

import anyio
import httpx2

from mcp_reconciler.reconciler import telemetry

__all__ = ["DEFAULT_LIFETIME_S", "ClientCredentialsAuth", "UpstreamAuthError", "client_credentials_auth"]

DEFAULT_LIFETIME_S = 300.0
MAX_TOKEN_RESPONSE_BYTES = 64 * 1024
_ERROR_CODE = re.compile(r"[a-z_]{1,64}")

token_requests = telemetry.meter.create_counter(
    "upstream.oauth.token_requests", description="Client-credentials token requests to upstream token endpoints"
)


class UpstreamAuthError(Exception):
    """The token endpoint did not give a usable token. ``str()`` is safe to log and show."""


class ClientCredentialsAuth(httpx2.Auth):
    """``Authorization: Bearer`` from a cached client-credentials token; see the module doc.

    ``clock`` is monotonic seconds (injectable for tests). ``token_fetches`` counts token
    requests made by this instance."""

    def __init__(
        self,
        *,
        token_url: str,
        client_id: str,
        client_secret: str,
        scopes: tuple[str, ...] | list[str] = (),
        resource: str | None = None,
        audience: str | None = None,
        auth_method: str = "client_secret_basic",
        refresh_skew_s: float = 60.0,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.token_url = token_url
        self._client_id = client_id
        self._client_secret = client_secret
        self.scopes = tuple(scopes)
        self.resource = resource
        self.audience = audience
        self.auth_method = auth_method
        self.refresh_skew_s = refresh_skew_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._token: str | None = None
        self._renew_at = 0.0
        self._lock = anyio.Lock()
        self.token_fetches = 0

    def __repr__(self) -> str:  # never the secret or the token
        return f"ClientCredentialsAuth(token_url={self.token_url!r}, client_id={self._client_id!r})"

    def _fresh(self) -> str | None:
        return self._token if self._token is not None and self._clock() < self._renew_at else None

    async def _fetch_token(self) -> str:
        """Ask the token endpoint (bounded in time and bytes) and cache the answer."""
        self.token_fetches += 1
        token_requests.add(1)
        form: dict[str, str] = {"grant_type": "client_credentials"}
        if self.scopes:
            form["scope"] = " ".join(self.scopes)
        if self.resource:
            form["resource"] = self.resource
        if self.audience:
            form["audience"] = self.audience
        headers = {"Accept": "application/json"}
        if self.auth_method == "client_secret_post":
            form["client_id"], form["client_secret"] = self._client_id, self._client_secret
        else:
            # RFC 6749 §2.3.1: both parts form-urlencoded before Basic encoding.
            pair = f"{quote(self._client_id, safe='')}:{quote(self._client_secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        body = bytearray()
        try:
            with anyio.fail_after(self.timeout_s):
                # Its own short-lived client: token requests are rare (once per token lifetime),
                # and the connection's client must not apply this auth to them.
                async with httpx2.AsyncClient(timeout=self.timeout_s, follow_redirects=False) as http:
                    async with http.stream("POST", self.token_url, data=form, headers=headers) as response:
                        async for chunk in response.aiter_bytes():
                            body += chunk
                            if len(body) > MAX_TOKEN_RESPONSE_BYTES:
                                raise UpstreamAuthError("token endpoint answer too large")
                        status = response.status_code
        except TimeoutError:
            raise UpstreamAuthError(f"token endpoint did not answer within {self.timeout_s:g} s") from None
        except httpx2.HTTPError as exc:
            raise UpstreamAuthError(f"token endpoint unreachable: {type(exc).__name__}") from None
        try:
            answer: Any = json.loads(bytes(body))
        except (ValueError, UnicodeDecodeError):
            answer = None
        if status != 200 or not isinstance(answer, dict):
            code = answer.get("error") if isinstance(answer, dict) else None
            detail = f" ({code})" if isinstance(code, str) and _ERROR_CODE.fullmatch(code) else ""
            raise UpstreamAuthError(f"token endpoint answered HTTP {status}{detail}")
        token = answer.get("access_token")
        token_type = answer.get("token_type")
        if not isinstance(token, str) or not token or not isinstance(token_type, str) or token_type.lower() != "bearer":
            raise UpstreamAuthError("token endpoint answer has no bearer access_token")
        lifetime = answer.get("expires_in")
        if isinstance(lifetime, bool) or not isinstance(lifetime, int | float) or lifetime <= 0:
            lifetime = DEFAULT_LIFETIME_S
        skew = min(self.refresh_skew_s, float(lifetime) / 2)
        self._token, self._renew_at = token, self._clock() + float(lifetime) - skew
        return token

    async def token(self) -> str:
        """A token that is not about to expire: the cached one, or one fetched now (one fetch
        for all concurrent callers)."""
        token = self._fresh()
        if token is not None:
            return token
        async with self._lock:
            return self._fresh() or await self._fetch_token()

    async def renew(self, rejected: str) -> str:
        """A token other than ``rejected`` (which the upstream refused), fetched unless another
        request already renewed it."""
        async with self._lock:
            fresh = self._fresh()
            if fresh is not None and fresh != rejected:
                return fresh
            self._token = None
            return await self._fetch_token()

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        """Send ``request`` with a bearer token; on a 401, renew the token once and replay the request if
        the renewed token differs. UpstreamAuthError when the token endpoint fails."""
        token = await self.token()
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code != 401:
            return
        # Revoked or rotated early: renew once and replay.
        renewed = await self.renew(token)
        if renewed == token:
            return
        request.headers["Authorization"] = f"Bearer {renewed}"
        yield request

    def sync_auth_flow(self, request: httpx2.Request) -> Any:
        """Always RuntimeError: this auth is for ``httpx2.AsyncClient`` only."""
        raise RuntimeError("ClientCredentialsAuth is for httpx2.AsyncClient only")


def client_credentials_auth(oauth: Mapping[str, Any] | None) -> ClientCredentialsAuth | None:
    """The auth for a transport's ``oauth`` entry (as built by :mod:`reconciler.config`), or
    ``None`` when the source has none."""
    if not oauth:
        return None
    return ClientCredentialsAuth(
        token_url=str(oauth["token_url"]),
        client_id=str(oauth["client_id"]),
        client_secret=str(oauth["client_secret"]),
        scopes=tuple(oauth.get("scopes") or ()),
        resource=oauth.get("resource"),
        audience=oauth.get("audience"),
        auth_method=str(oauth.get("auth_method", "client_secret_basic")),
        refresh_skew_s=float(oauth.get("refresh_skew_s", 60.0)),
        timeout_s=float(oauth.get("timeout_s", 10.0)),
    )
