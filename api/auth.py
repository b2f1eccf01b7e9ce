"""Bearer-token authentication and roles for the control API.

Roles: ``operator`` (everything) and ``owner`` (only the sessions it created: another owner's
session answers 404, never 403, so ids do not leak). A principal is known everywhere by its
role-qualified id (:attr:`Principal.id`, ``owner::alice``, ``operator::operator1``): sessions'
owners, holds' owners and per-owner limits use it, so an owner named ``operator1`` is never the
operator ``operator1``. Tokens come from the environment:
``MCP_RECONCILER_OPERATOR_TOKENS`` (comma-separated) and ``MCP_RECONCILER_OWNER_TOKENS``
(``owner=token`` pairs, comma-separated). Tokens are compared in constant time and never
logged. ``--insecure-no-auth`` makes every request an operator (local demos only, loudly).

With an ``oauth:`` section an access token works on ``/v1`` too (``api/oauth/edge.py``): its
subject is a principal of the ``oauth`` namespace (``oauth:<issuer>:<sub>``, :attr:`Principal.issuer`
set), operator or owner by the configured scope/claim rules. The edge authenticates it before the
handler runs and leaves the :class:`Principal` in the ASGI scope under :data:`PRINCIPAL_KEY`."""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from mcp_reconciler.reconciler.authority import oauth_principal_id, principal_id

__all__ = ["PRINCIPAL_KEY", "Authenticator", "Principal"]

#: Where an edge that authenticated a ``/v1`` request (an OAuth access token) leaves its
#: :class:`Principal` in the ASGI scope; the handlers read it before trying static tokens.
PRINCIPAL_KEY = "mcp_reconciler.control_principal"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated control-API caller: its role and its name within that role.

    ``issuer`` is set for an OAuth access token's subject (``name``): its id is then
    ``oauth:<issuer>:<name>[#<client>]`` whatever its role (``client``: the token's client id,
    ADR 0011), the same principal that owns the MCP sessions its token opens on ``/mcp``."""

    role: Literal["operator", "owner"]
    name: str
    issuer: str | None = None
    client: str = ""

    @property
    def id(self) -> str:
        """The role-qualified principal id (``owner::alice``, ``oauth:<issuer>:<sub>[#<client>]``);
        equal only for the same role and name (static) or the same issuer, subject and client (OAuth)."""
        if self.issuer is not None:
            return oauth_principal_id(self.issuer, self.name, self.client)
        return principal_id(self.role, self.name)


class Authenticator:
    """Maps a bearer token to its :class:`Principal` (module docstring): operators are
    ``operator1``, ``operator2``, … in the order given; owners by name. Immutable after
    construction, so concurrent requests need no lock; empty tokens are ignored."""

    def __init__(
        self,
        operator_tokens: list[str] | tuple[str, ...] = (),
        owner_tokens: Mapping[str, str] | None = None,
        *,
        insecure_no_auth: bool = False,
    ) -> None:
        self.insecure_no_auth = insecure_no_auth
        # Keyed by a digest so lookups never compare raw tokens in variable time.
        self._by_digest: dict[bytes, tuple[str, Principal]] = {}
        for i, token in enumerate(t for t in operator_tokens if t):
            self._by_digest[_digest(token)] = (token, Principal("operator", f"operator{i + 1}"))
        for owner, token in (owner_tokens or {}).items():
            if token:
                self._by_digest[_digest(token)] = (token, Principal("owner", owner))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, insecure_no_auth: bool = False) -> Authenticator:
        """An authenticator from ``MCP_RECONCILER_OPERATOR_TOKENS`` and ``MCP_RECONCILER_OWNER_TOKENS``
        (``environ``, default ``os.environ``); malformed owner pairs and blank tokens are skipped."""
        env = os.environ if environ is None else environ
        operators = [t.strip() for t in env.get("MCP_RECONCILER_OPERATOR_TOKENS", "").split(",") if t.strip()]
        owners: dict[str, str] = {}
        for pair in env.get("MCP_RECONCILER_OWNER_TOKENS", "").split(","):
            name, sep, token = pair.partition("=")
            if sep and name.strip() and token.strip():
                owners[name.strip()] = token.strip()
        return cls(operators, owners, insecure_no_auth=insecure_no_auth)

    @property
    def configured(self) -> bool:
        """Whether any token is configured (without one, only ``insecure_no_auth`` lets anyone in)."""
        return bool(self._by_digest)

    def authenticate(self, authorization: str | None) -> Principal | None:
        """The principal whose token the ``Authorization: Bearer`` header carries, compared in constant
        time; None for a missing, malformed or unknown credential. Every request is an operator under
        ``insecure_no_auth``."""
        if self.insecure_no_auth:
            return Principal("operator", "insecure-no-auth")
        if not authorization or not authorization.lower().startswith("bearer "):
            return None
        token = authorization[7:].strip()
        found = self._by_digest.get(_digest(token))
        if found is None or not hmac.compare_digest(found[0].encode(), token.encode()):
            return None
        return found[1]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()
