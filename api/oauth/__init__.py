"""The gateway as an OAuth 2.1 resource server (MCP authorization; ADR 0011).

One concept per module:

* :mod:`.identity` — :class:`Identity`, what every credential scheme produces;
* :mod:`.challenge` — :class:`AuthFailure` and the ``WWW-Authenticate: Bearer`` challenge;
* :mod:`.fetch` — bounded JSON over HTTP to authorization servers;
* :mod:`.jwks` — an issuer's signing keys: discovery, cache, refresh, rotation, bounds;
* :mod:`.validator` — JWT access-token validation (PyJWT);
* :mod:`.introspection` — RFC 7662 for opaque tokens;
* :mod:`.claims` — validated claims → identity, roles and grant set;
* :mod:`.cache` — the hot path: validated identities by token digest, bounded LRU;
* :mod:`.resource_server` — :class:`ResourceServer`, the one entry point for the edges;
* :mod:`.metadata` — RFC 9728 protected resource metadata and its routes;
* :mod:`.guard` — :class:`BearerGuard`, an ASGI guard that puts the identity in the scope.

The configuration models are in :mod:`mcp_reconciler.reconciler.oauth_config` (validated with
the rest of the config file)."""

from mcp_reconciler.api.oauth.challenge import AuthFailure, www_authenticate
from mcp_reconciler.api.oauth.guard import IDENTITY_KEY, BearerGuard
from mcp_reconciler.api.oauth.identity import GrantSet, Identity, PrincipalId
from mcp_reconciler.api.oauth.metadata import metadata_routes, protected_resource_metadata, resource_metadata_url
from mcp_reconciler.api.oauth.resource_server import Need, ResourceServer, bearer_token

__all__ = [
    "IDENTITY_KEY",
    "AuthFailure",
    "BearerGuard",
    "GrantSet",
    "Identity",
    "Need",
    "PrincipalId",
    "ResourceServer",
    "bearer_token",
    "metadata_routes",
    "protected_resource_metadata",
    "resource_metadata_url",
    "www_authenticate",
]
