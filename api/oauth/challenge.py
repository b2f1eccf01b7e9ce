"""Authentication failures and the ``WWW-Authenticate: Bearer`` challenge they answer with
(RFC 6750 §3, RFC 9728 §5.1).

Every failure has a fixed ``reason`` (for logs and metrics), an HTTP status and a fixed,
human-readable ``error_description``. Nothing of the presented token — not its claims, issuer,
audience, key id or any fragment of it — goes into a description, a header or a log line: a
token that failed validation is still somebody's credential, and echoing claims back helps an
attacker tune a forgery.

Statuses: no credential → 401 without ``error`` (RFC 6750 §3.1: the client simply has to
authenticate); a credential that is not acceptable → 401 ``invalid_token``; an acceptable
credential without the scope an endpoint needs → 403 ``insufficient_scope`` naming the scope;
the issuer's keys or introspection endpoint unreachable beyond their bound → 503
``temporarily_unavailable`` with ``Retry-After`` (failing closed, but not telling a valid client to
throw its token away). Each 401/403 carries ``resource_metadata`` so a spec-only MCP client can
discover where to log in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from starlette.types import Scope

__all__ = ["DESCRIPTIONS", "AuthFailure", "Reason", "www_authenticate"]

Reason = Literal[
    "missing",
    "invalid",
    "malformed",
    "unsupported_token",
    "algorithm",
    "unknown_key",
    "signature",
    "expired",
    "not_yet_valid",
    "audience",
    "issuer",
    "claims",
    "inactive",
    "scope",
    "role",
    "keys_unavailable",
    "introspection_unavailable",
]

#: (status, RFC 6750 error, description) per reason. Descriptions are fixed text (see module doc).
DESCRIPTIONS: dict[Reason, tuple[int, str | None, str]] = {
    "missing": (401, None, "an access token is required"),
    "invalid": (401, "invalid_token", "the access token is not valid"),
    "malformed": (401, "invalid_token", "the access token is malformed"),
    "unsupported_token": (401, "invalid_token", "the access token is not a JWT this resource can validate"),
    "algorithm": (401, "invalid_token", "the access token's signing algorithm is not accepted"),
    "unknown_key": (401, "invalid_token", "the access token was signed with an unknown key"),
    "signature": (401, "invalid_token", "the access token's signature is invalid"),
    "expired": (401, "invalid_token", "the access token expired"),
    "not_yet_valid": (401, "invalid_token", "the access token is not valid yet"),
    "audience": (401, "invalid_token", "the access token was not issued for this resource"),
    "issuer": (401, "invalid_token", "the access token's issuer is not trusted"),
    "claims": (401, "invalid_token", "the access token's claims are missing or not acceptable"),
    "inactive": (401, "invalid_token", "the access token is not active"),
    "scope": (403, "insufficient_scope", "the access token lacks a required scope"),
    "role": (403, "insufficient_scope", "this endpoint needs the operator role"),
    "keys_unavailable": (503, "temporarily_unavailable", "the authorization server's keys are unavailable; retry"),
    "introspection_unavailable": (
        503,
        "temporarily_unavailable",
        "the authorization server's introspection endpoint is unavailable; retry",
    ),
}

RETRY_AFTER_S = 5


class AuthFailure(Exception):
    """A request that cannot be authenticated or authorized.

    ``scope`` lists the scopes that would help (the ``scope`` challenge parameter): for
    ``insufficient_scope`` the missing ones, otherwise the scopes any token needs. ``str()`` is
    the fixed description."""

    def __init__(self, reason: Reason, *, scope: Sequence[str] = ()) -> None:
        status, error, description = DESCRIPTIONS[reason]
        super().__init__(description)
        self.reason: Reason = reason
        self.status = status
        self.error = error
        self.description = description
        self.scope: tuple[str, ...] = tuple(scope)

    def headers(self, resource_metadata_url: str | None) -> dict[str, str]:
        """The response headers for this failure: ``WWW-Authenticate`` on 401/403,
        ``Retry-After`` on 503."""
        if self.status == 503:
            return {"Retry-After": str(RETRY_AFTER_S)}
        return {
            "WWW-Authenticate": www_authenticate(
                resource_metadata_url, error=self.error, description=self.description, scope=self.scope
            )
        }

    def body(self) -> dict[str, str]:
        """An RFC 6749-style JSON body (``error``, ``error_description``)."""
        return {"error": self.error or "invalid_request", "error_description": self.description}


def _quoted(value: str) -> str:
    # Values are ours (URLs from the config, fixed descriptions, configured scopes), but a
    # quoted-string must never be able to end early.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def www_authenticate(
    resource_metadata_url: str | None,
    *,
    error: str | None = None,
    description: str | None = None,
    scope: Sequence[str] = (),
) -> str:
    """``Bearer resource_metadata="…", scope="…", error="…", error_description="…"`` (absent
    parameters omitted; ``Bearer`` alone when there is nothing to say)."""
    params: list[str] = []
    if resource_metadata_url:
        params.append(f"resource_metadata={_quoted(resource_metadata_url)}")
    if scope:
        params.append(f"scope={_quoted(' '.join(scope))}")
    if error:
        params.append(f"error={_quoted(error)}")
        if description:
            params.append(f"error_description={_quoted(description)}")
    return "Bearer " + ", ".join(params) if params else "Bearer"


def authorization_header(scope: Scope) -> str | None:
    """The raw ``Authorization`` header of an HTTP ``scope`` (the first one), or ``None``."""
    for key, value in scope["headers"]:
        if key == b"authorization":
            return str(value.decode("latin-1"))
    return None
