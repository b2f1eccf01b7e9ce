"""The edge pipeline of ``/mcp`` on the gateway's data plane: every check the gateway makes
before a request reaches its era's handler, called in one explicit order by :meth:`Pipeline.admit`.

1. **Drain (I14)** — once the gateway stops accepting work, new requests get 503
   (``api/lifecycle.Drain``).
2. **Host and Origin** — DNS-rebinding protection: 421 for a foreign ``Host``, 403 for a foreign
   ``Origin`` (``api/host_check``).
3. **Limits (I18)** — the body is bounded while it is read (413, ``api/http_limits.BodyLimit``);
   connections and header bytes are bounded below ASGI (``ConnectionGuard``, in ``api/server``).
4. **Credentials (I16, OAuth)** — a session token, an access token, or anonymous when the config
   opens it; the accepted identity goes into the scope, a refusal is 401/403 with a challenge
   (``api/mcp_auth.McpGuard``).
5. **View** (``/mcp/<view>`` only, ADR 0026) — 404 for a view the catalog lacks, 403 for a
   session of another view (``api/mcp_views.ViewGate``).

Each step is a plain call that returns "go on" (with what it learned: the body, the identity) or
a :class:`~api.http_limits.Refusal`, which this module sends; none wraps the next, so the steps
have returned before the request runs (they are no frames on its way to the upstream). Then the
era's handler (``asgi``) and the dispatcher; sanitization (I12) is the dispatcher's: every error
that leaves is ``error_data``'s."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from starlette.types import Receive, Scope, Send

from mcp_reconciler.api.host_check import LOOPBACK_HOSTS, LOOPBACK_ORIGINS, HostOriginCheck
from mcp_reconciler.api.http_limits import BodyLimit, Refusal
from mcp_reconciler.api.lifecycle import Drain
from mcp_reconciler.api.mcp_auth import CredentialSource, McpGuard, McpIdentity
from mcp_reconciler.api.mcp_views import ViewGate
from mcp_reconciler.api.oauth.identity import GrantSet


@dataclass(frozen=True)
class EdgePolicy:
    """What the edge checks: allowed hosts/origins beyond loopback, the body bound, the accepted
    credentials, anonymous access (read per request) and the OAuth challenge details."""

    credentials: Sequence[CredentialSource]
    anonymous: Callable[[], GrantSet | None] = lambda: None
    allowed_hosts: Sequence[str] = ()
    allowed_origins: Sequence[str] = ()
    max_body_bytes: int = 4 * 1024 * 1024
    resource_metadata_url: str | None = None
    oauth_scope: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request every step let through: who sent it and its whole body."""

    identity: McpIdentity
    body: bytes


class Pipeline:
    """The steps of ``/mcp``'s edge (module docstring). ``drain`` is its drain switch (shared with
    the listener's other edge: ``drain.close()`` at shutdown), ``body`` its body limit (whose
    ``refused`` count is a ``gateway.limits.hits`` reading)."""

    def __init__(self, policy: EdgePolicy, views: ViewGate, drain: Drain | None = None) -> None:
        self.drain = drain if drain is not None else Drain()
        self.host = HostOriginCheck(
            allowed_hosts=[*LOOPBACK_HOSTS, *policy.allowed_hosts],
            allowed_origins=[*LOOPBACK_ORIGINS, *policy.allowed_origins],
            prefixes=("/mcp",),
        )
        self.body = BodyLimit({"/mcp": policy.max_body_bytes})
        self.credentials = McpGuard(
            credentials=policy.credentials,
            anonymous=policy.anonymous,
            resource_metadata_url=policy.resource_metadata_url,
            scope=policy.oauth_scope,
        )
        self.views = views

    async def admit(self, scope: Scope, receive: Receive, send: Send, view: str | None) -> Admitted | None:
        """Run steps 1-5 in order on an HTTP request to ``/mcp`` (``view``: to ``/mcp/<view>``):
        what they admitted, or ``None`` when a step refused (the refusal is sent here) or the
        client left while its body was read (nothing to answer)."""
        refusal = self.drain.check(scope)  # 1. drain
        if refusal is None:
            refusal = self.host.check(scope)  # 2. Host and Origin
        if refusal is not None:
            await refusal.send(send)
            return None
        body = await self.body.read(scope, receive)  # 3. limits
        if body is None:
            return None
        if isinstance(body, Refusal):
            await body.send(send)
            return None
        identity = await self.credentials.admit(scope)  # 4. credentials
        if isinstance(identity, Refusal):
            await identity.send(send)
            return None
        if view is not None:
            refusal = self.views.check(scope, view, identity)  # 5. view
            if refusal is not None:
                await refusal.send(send)
                return None
        return Admitted(identity, body)
