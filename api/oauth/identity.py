"""Who a request is: the one value every credential scheme produces and every edge consumes.

A static control-API token (``api/auth.py``), a validated JWT access token and an introspected
opaque token all become an :class:`Identity`. The edges (``/v1`` handlers, the ``/mcp`` session
binding) look only at the identity, never at the credential, so "both schemes at once" is one
code path, and a rotated token of the same subject is the same principal (a legacy MCP session
bound to it survives the rotation; another subject's token is refused).

Namespaces (issue 10, item 3): a principal is ``(namespace, issuer, subject)``, and for OAuth
tokens also the client id (issue 30): ``(oauth, issuer, subject, client)``. Static operators
live in ``operator``, static owners in ``owner``, token subjects in ``oauth`` under their issuer.
An owner named ``operator1`` is ``owner::operator1`` and can never equal the operator
``operator::operator1``; ``alice`` at one issuer is not ``alice`` at another, nor the static owner
``alice``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mcp_reconciler.api.auth import Principal
from mcp_reconciler.reconciler.authority import oauth_principal_id

__all__ = ["GrantSet", "Identity", "PrincipalId", "Role", "Scheme"]

Role = Literal["operator", "owner"]
Scheme = Literal["static", "jwt", "introspection"]


@dataclass(frozen=True, slots=True)
class PrincipalId:
    """The stable key of a principal. Equality is every part; nothing else identifies. An OAuth
    principal is (issuer, subject, client id): another application's token of the same user is
    another principal (ADR 0011)."""

    namespace: Literal["operator", "owner", "oauth"]
    issuer: str  # "" for static tokens
    subject: str
    client: str = ""  # the token's client id (azp / client_id); "" for static tokens or none named

    def __str__(self) -> str:
        if self.namespace == "oauth":
            return oauth_principal_id(self.issuer, self.subject, self.client)
        return f"{self.namespace}:{self.issuer}:{self.subject}"


@dataclass(frozen=True, slots=True)
class GrantSet:
    """What the MCP sessions an identity opens may see: ``current`` (every name visible at
    creation), ``none``, ``explicit`` (exactly ``names``) or ``follow`` (every name the catalog
    has or gains, of ``sources`` — all sources when empty). ``names`` is empty unless explicit,
    ``sources`` unless follow. The front door's anonymous and local callers use it too
    (``api/mcp_auth.py``)."""

    policy: Literal["current", "none", "explicit", "follow"]
    names: frozenset[str] = frozenset()
    sources: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated caller.

    ``roles`` decide the ``/v1`` surface (``operator``: everything; ``owner``: its own sessions);
    ``scopes`` are the token's (empty for static tokens); ``grants`` is the grant set for
    sessions it opens (``None``: the gateway's configured default). ``expires_at`` is the
    credential's expiry (epoch seconds; ``None`` for static tokens). Immutable and hashable:
    safe to cache and to compare."""

    principal: PrincipalId
    scheme: Scheme
    roles: frozenset[Role]
    scopes: frozenset[str] = frozenset()
    client_id: str | None = None
    grants: GrantSet | None = None
    expires_at: float | None = None

    @property
    def is_operator(self) -> bool:
        """Whether the identity holds the ``operator`` role (everything under ``/v1``)."""
        return "operator" in self.roles

    @property
    def subject(self) -> str:
        """The principal's subject (its name within its namespace and issuer)."""
        return self.principal.subject

    @property
    def owner_key(self) -> str:
        """The namespaced owner string for sessions this identity creates (``str(principal)``)."""
        return str(self.principal)

    @classmethod
    def from_principal(cls, principal: Principal) -> Identity:
        """The identity of a static control-API token (``api/auth.py``): its role is its namespace."""
        return cls(
            principal=PrincipalId(principal.role, "", principal.name),
            scheme="static",
            roles=frozenset({principal.role}),
        )
