"""RFC 9728 protected resource metadata: how a client that only knows the MCP specification
finds out where to get a token for this gateway.

The document names the resource identifier (the configured ``resource``, never derived from a
request's ``Host``: behind a proxy that header is whatever the client sent), the trusted
authorization servers, the scopes and the bearer method (header only). It is served at the root
form ``/.well-known/oauth-protected-resource`` and at the path-suffixed form for the resource's
path (``/.well-known/oauth-protected-resource/mcp``, RFC 9728 §3.1), which is the URL a 401
names in ``resource_metadata``. Public, static, cacheable, and readable cross-origin (browser
based MCP clients fetch it)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcp_reconciler.reconciler.oauth_config import OAuthConfig

__all__ = ["WELL_KNOWN", "metadata_routes", "protected_resource_metadata", "resource_metadata_url"]

WELL_KNOWN = "/.well-known/oauth-protected-resource"


def resource_metadata_url(resource: str) -> str:
    """The metadata URL for ``resource``: the well-known segment inserted between host and path."""
    parts = urlsplit(resource)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN + path, "", ""))


def supported_scopes(config: OAuthConfig) -> list[str]:
    """``scopes_supported`` if configured, else every scope the role and grant rules mention."""
    if config.scopes_supported is not None:
        return list(config.scopes_supported)
    return sorted({*config.roles.required_scopes, *config.roles.operator_scopes})


def protected_resource_metadata(config: OAuthConfig) -> dict[str, Any]:
    """The RFC 9728 document for ``config``."""
    doc: dict[str, Any] = {
        "resource": config.resource,
        "authorization_servers": [issuer.issuer for issuer in config.issuers],
        "bearer_methods_supported": ["header"],
    }
    scopes = supported_scopes(config)
    if scopes:
        doc["scopes_supported"] = scopes
    if config.resource_name:
        doc["resource_name"] = config.resource_name
    return doc


def metadata_routes(config: OAuthConfig) -> list[Route]:
    """GET routes for the root and the path-suffixed metadata URL (one route when the resource
    has no path)."""
    body = protected_resource_metadata(config)

    async def endpoint(request: Request) -> Response:
        return JSONResponse(
            body,
            headers={"Cache-Control": "public, max-age=3600", "Access-Control-Allow-Origin": "*"},
        )

    paths = [WELL_KNOWN]
    suffixed = urlsplit(resource_metadata_url(config.resource)).path
    if suffixed != WELL_KNOWN:
        paths.append(suffixed)
    return [Route(path, endpoint=endpoint, methods=["GET"]) for path in paths]
