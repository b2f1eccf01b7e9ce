"""Sessions: which gateway session a downstream request belongs to, in both protocol eras.

ADR 0006 gives the rules, ADR 0013 the credentials. Every HTTP request arrives with an
:class:`~mcp_reconciler.api.mcp_auth.McpIdentity` the HTTP layer accepted (``api/mcp_auth.py``,
before the SDK saw the request); a request without one is refused here too (fail closed). On
stdio and in-memory transports there is no HTTP layer: the caller is the local user (the process
owner, ``local::<user>``) with the front door's local grant policy.

- An identity that *is* a gateway session (a session token) binds to that session, in either
  era, on any transport; a session deleted meanwhile answers -32018.
- An identity that names no session (anonymous, local; later an OAuth subject) gets a session
  the front door creates with the identity's grant spec: one per 2025-11-25 connection —
  created at the handshake's ``notifications/initialized`` (so pushes can reach it at once) and
  removed when the connection ends — and one shared per principal for sessionless 2026-07-28
  requests.
- A legacy connection stays bound to the principal that opened it: a request on it from another
  principal is refused (-32018; on HTTP the SDK's session manager already answered 404). An OAuth
  principal is (issuer, subject, client id), so another application's token is another principal.
- What a request may use is evaluated from the token it presents (ADR 0011, issue 30): a
  sessionless principal has one session per *entitlement* (grant set and roles,
  :func:`entitlement`; at most :data:`MODERN_PER_PRINCIPAL`, oldest dropped), so a narrower token
  gets exactly its narrower grants at once; a legacy connection is refused (-32018
  ``grants_changed``) a request whose token entitles it to anything else than the opener's.

- Named views (ADR 0026): a request to ``/mcp/<view>`` carries the view (``api/mcp_views.py``)
  and stdio may serve one (``stdio --view``). Sessions the front door creates are bound to the
  request's view (the principal's sessionless binding is per view); a legacy connection opened on
  one view is refused on another (-32018), and so is a session token of another view.

A :class:`Binding` ties one downstream identity to its gateway session and carries what the
notifier needs to tell it about view changes. Bindings live in :attr:`Sessions.bindings`, keyed
by the legacy connection's key, ``session:<id>`` or ``principal:<principal id>``; no token is
ever part of a key or a log line."""

from __future__ import annotations

import contextlib
import functools
import getpass
import hashlib
import time
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, Literal

from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.connection import Connection

from mcp_reconciler.api.frontdoor import link
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.revisions import header_generation
from mcp_reconciler.api.mcp_auth import IDENTITY_KEY, McpIdentity
from mcp_reconciler.api.mcp_views import request_view
from mcp_reconciler.api.oauth.identity import GrantSet
from mcp_reconciler.reconciler.authority import Authority, GrantPolicy, Session, View, principal_id
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import EntryKind

Era = Literal["legacy", "modern"]
Transport = Literal["http", "stdio", "memory"]


@dataclass(eq=False, slots=True)
class Binding:
    """One downstream identity bound to a gateway session, with its notification state: the view
    it was last told about (``last_view``), the kinds whose change it has not been told yet
    (``pending``) and how many change notifications it was sent. ``principal`` is who opened it;
    ``control_tools`` / ``operator`` are what that identity may do with the built-in tools."""

    session: Session
    era: Era
    key: str
    principal: str = ""
    owned: bool = False  # the session was created for this binding (not a control-API session)
    conn: Connection | None = None  # legacy: the SDK's per-connection object (pushes ride on it)
    http_session_id: str | None = None
    last_view: View | None = None
    pending: AbstractSet[EntryKind] = frozenset()  # the shared empty set until a change is owed
    notifications: int = 0
    control_tools: bool = False
    operator: bool = False
    log_level: str | None = None  # legacy ``logging/setLevel``; ``None``: every record (see ``logs``)
    #: What the opener's credential entitles it to (:func:`entitlement`): a request whose token
    #: entitles it to something else is not served by this binding (ADR 0011, issue 30).
    entitlement: str = ""


def local_identity(grants: GrantSet) -> McpIdentity:
    """The caller of a local transport (stdio, in-memory): the process owner, who may use the
    control tools and see the operator's status (they can read the config file anyway)."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment: still one local principal
        user = "local"
    return McpIdentity(principal=principal_id("local", user), grants=grants, control_tools=True, operator=True)


#: Sessionless (2026-07-28) bindings one principal may have at once, one per distinct
#: entitlement its tokens carried (per view); past it the oldest is dropped with its session.
MODERN_PER_PRINCIPAL = 8


@functools.lru_cache(maxsize=4096)
def entitlement(identity: McpIdentity) -> str:
    """A digest of what ``identity``'s credential entitles it to — its grant set and whether it
    may use the control tools or see the operator's status — evaluated per request from the token
    presented (ADR 0011): two tokens of one principal with the same scopes agree; a narrower or
    wider one does not. Cached per identity (the OAuth edge hands back one object per token)."""
    grants = identity.grants
    parts = [str(identity.control_tools), str(identity.operator)]
    if grants is not None:
        parts += [grants.policy, *sorted(grants.names), "|", *sorted(grants.sources)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _invalid(message: str, code: str) -> MCPError:
    return MCPError(-32018, message, {"code": code, "retryable": False})


class Sessions:
    """Finds or creates the :class:`Binding` of every request (:meth:`binding`) and removes it
    when its downstream goes away. A session created for a binding (``owned``) is removed from
    the authority with it; a control-API or config session outlives its bindings."""

    def __init__(
        self, catalog: CatalogAccess, authority: Authority, *, local: GrantSet, local_view: str | None = None
    ) -> None:
        self._catalog = catalog
        self._authority = authority
        self._local = local_identity(local)
        self._local_view = local_view
        self.bindings: dict[str, Binding] = {}
        self._modern: dict[str, list[str]] = {}  # "<principal>@<view>" -> its sessionless binding keys, oldest first

    @contextlib.contextmanager
    def in_use(self, ctx: ServerRequestContext[Any]) -> Iterator[None]:
        """Around every request (entered by the data plane's dispatcher): while a request of a
        session's token runs, the session is in use, and its end is the session's newest activity
        (idle expiry, ADR 0032). O(1)."""
        request = ctx.request
        identity = request.scope.get(IDENTITY_KEY) if request is not None else None
        session_id = identity.session_id if isinstance(identity, McpIdentity) else None
        session = self._authority.get(session_id) if session_id is not None else None
        if session is None:
            yield
            return
        session.in_flight += 1
        session.last_active_at = time.time()
        try:
            yield
        finally:
            session.in_flight -= 1
            session.last_active_at = time.time()

    def connected(self) -> set[str]:
        """The ids of the sessions an open MCP connection (2025-11-25) is bound to: in use."""
        return {b.session.id for b in self.bindings.values() if b.era == "legacy"}

    def identity(self, ctx: ServerRequestContext[Any]) -> McpIdentity:
        """Who sent ``ctx``'s request: the identity the HTTP layer accepted, or the local user on
        a transport without HTTP. An HTTP request without one is refused (fail closed)."""
        request = ctx.request
        if request is None:
            return self._local
        identity = request.scope.get(IDENTITY_KEY)
        if not isinstance(identity, McpIdentity):
            raise _invalid("a valid session credential is required", "unauthenticated")
        return identity

    def view(self, ctx: ServerRequestContext[Any]) -> str | None:
        """The named view ``ctx``'s request was addressed to (``None``: the whole catalog)."""
        request = ctx.request
        return self._local_view if request is None else request_view(request.scope)

    def binding(self, ctx: ServerRequestContext[Any]) -> Binding:
        """The binding of ``ctx``'s downstream, created on first use. Raises ``MCPError(-32018)``
        when the identity's session is gone, the connection belongs to another principal, or the
        session belongs to another view than the one the request was addressed to."""
        identity = self.identity(ctx)
        view = self.view(ctx)
        if identity.session_id is not None:
            own = self._authority.get(identity.session_id)
            if own is None:
                raise _invalid("invalid session token", "invalid_token")  # deleted after the HTTP check
            if view is not None and own.view != view:
                raise _invalid("this session belongs to another view", "wrong_view")
        if str(ctx.protocol_version).startswith("2025"):
            conn = link.connection_of(ctx)
            key = link.connection_key(conn)
            binding = self.bindings.get(key)
            if binding is None:
                binding = self._bind("legacy", key, identity, view, header_generation(self._catalog, ctx))
                binding.conn = conn
                binding.http_session_id = link.http_session_id(conn)
                # Unbound when the plane ends the connection (:meth:`connection_closed`): no
                # callback per connection on its exit stack (~1.4 KiB each, issue 26).
            elif binding.principal != identity.principal:
                # The SDK's session manager already answers 404 on HTTP; this holds on any transport.
                raise _invalid("this MCP session was opened by another identity", "identity_mismatch")
            elif binding.entitlement != entitlement(identity):
                # A later token of the same principal with other scopes: its grants are not this
                # session's, so it may not use them (narrower) nor silently gain (wider).
                raise _invalid(
                    "this MCP session was opened with a token granting other names or roles; "
                    "open a new MCP session with this token",
                    "grants_changed",
                )
            elif view is not None and binding.session.view != view:
                raise _invalid("this MCP session was opened on another view", "wrong_view")
            return binding
        if identity.session_id is not None:
            key = f"session:{identity.session_id}"
        else:
            # One session per principal, view and entitlement: a token with other scopes gets the
            # session of exactly its grants, at once (never the grants another token opened).
            base = f"principal:{identity.principal}" if view is None else f"principal:{identity.principal}@{view}"
            key = f"{base}#{entitlement(identity)}"
        binding = self.bindings.get(key)
        if binding is None:
            if identity.session_id is None:
                self._make_room(f"{identity.principal}@{view}")
            binding = self._bind("modern", key, identity, view)
            if identity.session_id is None:
                self._modern.setdefault(f"{identity.principal}@{view}", []).append(key)
        return binding

    def _make_room(self, principal: str) -> None:
        """Keep a principal's sessionless bindings under :data:`MODERN_PER_PRINCIPAL`: drop the
        oldest (its session is removed; the removal listeners forget the binding)."""
        keys = self._modern.get(principal)
        if not keys:
            return
        keys[:] = [k for k in keys if k in self.bindings]
        while len(keys) >= MODERN_PER_PRINCIPAL:
            oldest = self.bindings.get(keys.pop(0))
            if oldest is not None and oldest.owned:
                self._authority.remove(oldest.session.id)
        if not keys:
            del self._modern[principal]

    def forget(self, session_id: str) -> list[str]:
        """Drop every binding of a session that was removed (its token no longer authenticates);
        returns their keys so the caller can close what it keeps per binding."""
        keys = [key for key, binding in self.bindings.items() if binding.session.id == session_id]
        for key in keys:
            del self.bindings[key]
        return keys

    def _bind(
        self, era: Era, key: str, identity: McpIdentity, view: str | None, grants_from: Generation | None = None
    ) -> Binding:
        live = self._catalog.current()
        gen = live.generation if live is not None else None
        session = self._authority.get(identity.session_id) if identity.session_id is not None else None
        owned = session is None  # created for this connection: it ends with the connection
        if session is None:
            spec = identity.grants
            if spec is None:
                raise _invalid("this identity may not open a session", "no_grants")
            session = self._authority.create(
                identity.principal,
                grants_from or gen,
                policy=GrantPolicy(spec.policy),
                names=sorted(spec.names),
                sources=sorted(spec.sources),
                transport_owned=True,
                view=view,
            )
        binding = Binding(
            session=session,
            era=era,
            key=key,
            principal=identity.principal,
            owned=owned,
            control_tools=identity.control_tools,
            operator=identity.operator,
            entitlement=entitlement(identity),
        )
        binding.last_view = self._authority.view(session, gen) if gen is not None else None
        self.bindings[key] = binding
        return binding

    def connection_closed(self, conn: Connection) -> None:
        """The plane ended the 2025-era connection ``conn`` (HTTP DELETE, idle reaping, stdio
        EOF, shutdown), after its exit stack unwound: its binding goes, and with it the session
        made for it. Called once per connection, whether or not it was ever bound."""
        self._unbind(link.connection_key(conn))

    def _unbind(self, key: str) -> None:
        binding = self.bindings.pop(key, None)
        if binding is not None and binding.owned:
            self._authority.remove(binding.session.id)
