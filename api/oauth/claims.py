"""Validated token claims → :class:`Identity` (the claim mapping of ADR 0011).

* **Principal**: (issuer, ``sub``, client id) — ``oauth:<issuer>:<sub>#<client>``; the client id
  is ``client_id`` (RFC 9068) or ``azp`` (OpenID), so two applications of one user are two
  principals (ADR 0011). A token without ``sub`` (some client-credentials tokens) is its client.
  Neither → refused.
* **Scopes**: ``scope`` (RFC 9068: space-separated string) or ``scp`` (string or list: Entra ID,
  Okta). Unknown shapes count as no scopes.
* **Roles**: ``operator`` when a scope is in ``roles.operator_scopes`` or a claim matches
  ``roles.operator_claims``; ``owner`` otherwise. Requirements (``required_scopes``, operator-only
  endpoints) are checked per request by the resource server, not here: the identity states
  facts, the endpoint decides.
* **Grant set**: ``grants.policy``; for ``explicit``, the names from scopes with
  ``grants.scope_prefix`` and from the list claim ``grants.claim``. At most
  ``Bounds().names_per_grant`` names of at most ``Bounds().name_chars`` characters, or the
  token is refused (``claims``): silently dropping grants would be worse."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_reconciler.api.oauth.challenge import AuthFailure
from mcp_reconciler.api.oauth.identity import GrantSet, Identity, PrincipalId, Role, Scheme
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.oauth_config import GrantRules, RoleRules

__all__ = ["identity_from_claims", "scopes_of"]

_MAX_SCOPES = 256
_MAX_SUBJECT_CHARS = 512


def scopes_of(claims: Mapping[str, Any]) -> frozenset[str]:
    """The token's scopes from ``scope`` or ``scp`` (bounded)."""
    raw = claims.get("scope", claims.get("scp"))
    if isinstance(raw, str):
        items = raw.split()
    elif isinstance(raw, list) and all(isinstance(s, str) for s in raw):
        items = list(raw)
    else:
        return frozenset()
    if len(items) > _MAX_SCOPES:
        raise AuthFailure("claims")
    return frozenset(items)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def identity_from_claims(
    claims: Mapping[str, Any],
    *,
    issuer: str,
    scheme: Scheme,
    roles: RoleRules,
    grants: GrantRules,
    bounds: Bounds | None = None,
) -> Identity:
    """The identity a validated token (or introspection answer) stands for; raises
    :class:`AuthFailure` (``claims``) when it names no subject or carries too many grants."""
    limits = bounds or Bounds()
    client_id = next((v for k in ("client_id", "azp") if isinstance(v := claims.get(k), str) and v), None)
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        subject = client_id
    if not subject or len(subject) > _MAX_SUBJECT_CHARS:
        raise AuthFailure("claims")
    scopes = scopes_of(claims)

    operator = any(s in scopes for s in roles.operator_scopes) or any(
        value in wanted for claim, wanted in roles.operator_claims.items() for value in _strings(claims.get(claim))
    )
    role_set: frozenset[Role] = frozenset({"operator"}) if operator else frozenset({"owner"})

    names: set[str] = set()
    if grants.policy == "explicit":
        if grants.scope_prefix is not None:
            names.update(s[len(grants.scope_prefix) :] for s in scopes if s.startswith(grants.scope_prefix))
        if grants.claim is not None:
            names.update(_strings(claims.get(grants.claim)))
        names.discard("")
        if len(names) > limits.names_per_grant or any(len(n) > limits.name_chars for n in names):
            raise AuthFailure("claims")

    exp = claims.get("exp")
    return Identity(
        principal=PrincipalId("oauth", issuer, subject, client_id or ""),
        scheme=scheme,
        roles=role_set,
        scopes=scopes,
        client_id=client_id,
        grants=GrantSet(grants.policy, frozenset(names)),
        expires_at=float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None,
    )
