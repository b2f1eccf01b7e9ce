"""Sessions: which gateway session a downstream request belongs to, in both protocol eras.

ADR 0006 gives the rules. A bearer token issued by ``POST /v1/sessions`` *is* that session, in
either era, on any transport; an unknown token is an error (-32018), never a fallback. Without
a token, a 2025-11-25 connection is one gateway session, created at the handshake's
``notifications/initialized`` (so pushes can reach it at once) and removed when the connection
ends; a sessionless 2026-07-28 client shares one anonymous session per front door (``anonymous``
on HTTP, ``local`` on stdio and in-memory).

A :class:`Binding` ties one downstream identity to its gateway session and carries what the
notifier needs to tell it about view changes. Bindings live in :attr:`Sessions.bindings`, keyed
by the legacy connection's key, ``token:<token>`` or the anonymous key; the token is never
logged."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.connection import Connection

from mcp_reconciler.api import sdk_compat
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.revisions import header_generation
from mcp_reconciler.reconciler.authority import Authority, GrantPolicy, Session, View
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import EntryKind

Era = Literal["legacy", "modern"]
Transport = Literal["http", "stdio", "memory"]


@dataclass(eq=False)
class Binding:
    """One downstream identity bound to a gateway session, with its notification state: the view
    it was last told about (``last_view``), the kinds whose change it has not been told yet
    (``pending``) and how many change notifications it was sent."""

    session: Session
    era: Era
    key: str
    owned: bool = False  # the session was created for this binding (not a control-API session)
    conn: Connection | None = None  # legacy: the SDK's per-connection object (pushes ride on it)
    http_session_id: str | None = None
    last_view: View | None = None
    pending: set[EntryKind] = field(default_factory=set)
    notifications: int = 0
    log_level: str | None = None  # legacy ``logging/setLevel``; ``None``: every record (see ``logs``)


def bearer_token(ctx: ServerRequestContext[Any]) -> str | None:
    """The ``Authorization: Bearer`` token of an HTTP request, if any (``None`` on stdio)."""
    request = ctx.request
    if request is None:
        return None
    auth = request.headers.get("authorization")
    if auth and auth.lower().startswith("bearer "):
        return str(auth[7:].strip())
    return None


class Sessions:
    """Finds or creates the :class:`Binding` of every request (:meth:`binding`) and removes it
    when its downstream goes away. A session created for a binding (``owned``) is removed from
    the authority with it; a control-API session outlives its bindings."""

    def __init__(
        self, catalog: CatalogAccess, authority: Authority, *, grant_policy: GrantPolicy, transport: Transport
    ) -> None:
        self._catalog = catalog
        self._authority = authority
        self._grant_policy = grant_policy
        self._anonymous_key = "anonymous" if transport == "http" else "local"
        self.bindings: dict[str, Binding] = {}

    async def bind_at_handshake(
        self, ctx: ServerRequestContext[Any], call_next: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        """Server middleware: bind a legacy connection when its ``notifications/initialized``
        arrives, so pushes can reach it before its first request. A bad token is answered on the
        first request instead (a notification has no response to carry the error)."""
        result = await call_next(ctx)
        if ctx.method == "notifications/initialized":
            with contextlib.suppress(MCPError):
                self.binding(ctx)
        return result

    def binding(self, ctx: ServerRequestContext[Any]) -> Binding:
        """The binding of ``ctx``'s downstream, created on first use. Raises ``MCPError(-32018)``
        for a bearer token that names no session."""
        token = bearer_token(ctx)
        if token is not None and self._authority.by_token(token) is None:
            raise MCPError(-32018, "invalid session token", {"code": "invalid_token", "retryable": False})
        if str(ctx.protocol_version).startswith("2025"):
            conn = sdk_compat.connection_of(ctx)
            key = sdk_compat.connection_key(conn)
            binding = self.bindings.get(key)
            if binding is None:
                binding = self._bind("legacy", key, token, header_generation(self._catalog, ctx))
                binding.conn = conn
                binding.http_session_id = sdk_compat.http_session_id(conn)
                sdk_compat.on_connection_close(conn, self._unbind, key)
            return binding
        key = f"token:{token}" if token is not None else self._anonymous_key
        binding = self.bindings.get(key)
        if binding is None:
            binding = self._bind("modern", key, token)
        return binding

    def forget(self, session_id: str) -> list[str]:
        """Drop every binding of a session that was deleted (its token no longer authenticates);
        returns their keys so the caller can close what it keeps per binding."""
        keys = [key for key, binding in self.bindings.items() if binding.session.id == session_id]
        for key in keys:
            del self.bindings[key]
        return keys

    def _bind(self, era: Era, key: str, token: str | None, grants_from: Generation | None = None) -> Binding:
        live = self._catalog.current()
        gen = live.generation if live is not None else None
        session = self._authority.by_token(token) if token is not None else None
        owned = session is None  # created for this connection: it ends with the connection
        if session is None:
            session = self._authority.create(f"mcp:{key}", grants_from or gen, policy=self._grant_policy)
        binding = Binding(session=session, era=era, key=key, owned=owned)
        binding.last_view = self._authority.view(session, gen) if gen is not None else None
        self.bindings[key] = binding
        return binding

    def _unbind(self, key: str) -> None:
        binding = self.bindings.pop(key, None)
        if binding is not None and binding.owned:
            self._authority.remove(binding.session.id)
