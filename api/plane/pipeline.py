"""The edge pipeline of ``/mcp`` on the gateway's data plane: every check the gateway makes
before a request reaches the dispatcher, in one explicit order.

1. **Drain (I14)** — once the gateway stops accepting work, new requests get 503
   (``api/lifecycle.DrainGate``).
2. **Host and Origin** — DNS-rebinding protection: 421 for a foreign ``Host``, 403 for a foreign
   ``Origin`` (``api/host_check``).
3. **Limits (I18)** — the body is bounded before it is read (413, ``api/http_limits.BodyLimit``);
   connections and header bytes are bounded below ASGI (``ConnectionGuard``, in ``api/server``).
4. **Credentials (I16, OAuth)** — a session token, an access token, or anonymous when the config
   opens it; the accepted identity goes into the scope, a refusal is 401/403 with a challenge
   (``api/mcp_auth.McpGuard``).
5. The era's handler (``asgi``), then the dispatcher. Sanitization (I12) is the dispatcher's:
   every error that leaves is ``error_data``'s.

Each step is the same component the old plane uses; this module only fixes their order, so the
order is read here top to bottom rather than reconstructed from nested constructors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from starlette.types import ASGIApp

from mcp_reconciler.api.host_check import LOOPBACK_HOSTS, LOOPBACK_ORIGINS, HostOriginCheck
from mcp_reconciler.api.http_limits import BodyLimit
from mcp_reconciler.api.lifecycle import DrainGate
from mcp_reconciler.api.mcp_auth import CredentialSource, McpGuard
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


@dataclass(frozen=True)
class Pipeline:
    """The composed edge (``app``), its drain switch (``drain.close()`` at shutdown) and its body
    limit (whose ``refused`` count is a ``gateway.limits.hits`` reading)."""

    app: ASGIApp
    drain: DrainGate
    body: BodyLimit


def build(inner: ASGIApp, policy: EdgePolicy) -> Pipeline:
    """``inner`` behind steps 1-4, outermost first as listed in the module docstring."""
    app: ASGIApp = McpGuard(  # 4. credentials
        inner,
        credentials=policy.credentials,
        anonymous=policy.anonymous,
        resource_metadata_url=policy.resource_metadata_url,
        scope=policy.oauth_scope,
    )
    body = BodyLimit(app, {"/mcp": policy.max_body_bytes})  # 3. limits
    app = HostOriginCheck(  # 2. Host and Origin
        body,
        allowed_hosts=[*LOOPBACK_HOSTS, *policy.allowed_hosts],
        allowed_origins=[*LOOPBACK_ORIGINS, *policy.allowed_origins],
        prefixes=("/mcp",),
    )
    drain = DrainGate(app)  # 1. drain
    return Pipeline(drain, drain, body)
