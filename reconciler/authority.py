"""Exact-name authority (I9) and definition drift (I10) for downstream sessions.

A session may use exactly the names it was granted. Lookups answer one of four ways:
- granted and present → the entry (flagged if its definition drifted since the grant);
- granted but absent from the session's generation → ``UnavailableNameError`` ("currently
  unavailable", retryable: it works again if the name reappears);
- never granted → ``UnknownNameError`` (indistinguishable from a name that does not exist);
- granted, drifted, and the drift policy is ``quarantine`` → ``QuarantinedNameError`` until the
  owner re-grants it.
Automatic reconciliation never adds names to a session, with one exception the session's owner
chose: a *standing grant* (:class:`StandingGrant`). A ``follow`` session holds one over every
source or the listed ones, and a config-declared ``explicit`` session holds one over its named
entries; at each publication (:meth:`Authority.follow`, a synchronous publication listener, so
no request ever sees the new generation without them) the names the catalog *gained* that the
standing grant covers are granted, with the definition digest seen then. Names already granted
are never re-granted by it, so drift policy (I10) still applies to definitions the session has
seen.

Principals: ``owner`` is an opaque, role-qualified principal id (:func:`principal_id`:
``namespace:issuer:subject``, e.g. ``owner::alice``, ``operator::operator1``, ``config::ci``);
two roles' principals never compare equal, whatever their names.

Sessions declared in the config (:meth:`Authority.declare`) are reconciled after every cycle:
added, their grants re-applied when their declaration changes, their token rotated, removed.
Whoever keeps per-session state (the front door's bindings) subscribes to removals and grant
changes (:meth:`Authority.on_removed`, :meth:`Authority.on_changed`).

Grant sets are immutable mappings swapped on change, so the hot path reads them without locks.
Grants and refreshes of one session are serialized by that session's lock.

Many replicas (``reconciler/cluster/``): a *shared* session (created over the control API with a
cluster store configured) is mirrored to the store. This table stays the per-replica cache the
hot path reads: every change to a shared session is reported to the shared-change listeners
(:meth:`Authority.on_shared_change`, the cluster sync writes it), and records other replicas
wrote are installed with :meth:`Authority.put_shared` / :meth:`Authority.remove` (``announce=False``).
While the store cannot be confirmed within its staleness bound, :attr:`Authority.unconfirmed`
is set and shared sessions' calls fail with a retryable ``ClusterUnavailableError``;
sessions local to this replica (connection-owned, config-declared) are unaffected.

Views (ADR 0026): a session bound to a named view (:attr:`Session.view`) is granted, resolves and
lists only through that view's routing table (``Generation.routes_for``). Every method here reads
a generation's names through :func:`_routes`, so lists, calls, reads, prompts, completion,
subscriptions and tasks — which all go through :meth:`Authority.resolve` / :meth:`Authority.view`
— cannot reach a name outside the view, whatever the session was granted."""

from __future__ import annotations

import enum
import hashlib
import itertools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import anyio
from mcp.shared.uri_template import UriTemplate

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.digest import digest_parts
from mcp_reconciler.reconciler.discovery import DEFAULT_POLICY, DiscoveryMode, DiscoveryPolicy
from mcp_reconciler.reconciler.errors import (
    ClusterUnavailableError,
    GrantError,
    GrantLimitError,
    QuarantinedNameError,
    SessionLimitError,
    UnavailableNameError,
    UnknownNameError,
)
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import CatalogEntry, EntryKind, SessionSpec
from mcp_reconciler.reconciler.quotas import Quota, session_quota
from mcp_reconciler.reconciler.search_index import Hit
from mcp_reconciler.reconciler.sharing import NO_GRANTS, GrantMaps, ViewMemo

log = logging.getLogger("mcp_reconciler.authority")


class GrantPolicy(enum.StrEnum):
    """How a session's grants start (and, for ``follow``, grow). ADR 0007 says when to use which."""

    CURRENT = "current"  # every name visible when the session is created
    NONE = "none"  # nothing until the owner grants
    EXPLICIT = "explicit"  # exactly the names given at creation
    FOLLOW = "follow"  # a standing grant: every name the catalog has or gains (all sources or the listed ones)


def principal_id(namespace: str, subject: str, issuer: str = "") -> str:
    """The role-qualified id of a principal, ``namespace:issuer:subject`` (the issuer is empty for
    static credentials): ``owner::alice`` and ``operator::alice`` are different principals."""
    return f"{namespace}:{issuer}:{subject}"


def oauth_principal_id(issuer: str, subject: str, client: str = "") -> str:
    """The principal id of an OAuth identity, (issuer, subject, client id) (ADR 0011):
    ``oauth:<issuer>:<subject>``, plus ``#<client>`` when the token names its client (``azp`` /
    ``client_id``), so two applications of one user are two principals and never share a
    session or its grants. ``%`` and ``#`` in the subject and client are escaped, so no subject
    can spell another identity's id."""
    escaped = subject.replace("%", "%25").replace("#", "%23")
    if client:
        escaped += "#" + client.replace("%", "%25").replace("#", "%23")
    return principal_id("oauth", escaped, issuer)


#: The namespace of sessions declared in the config file: ``config::<session name>``.
CONFIG_NAMESPACE = "config"


@dataclass(frozen=True, slots=True)
class StandingGrant:
    """Names a session is granted as soon as the catalog has them (see the module docstring).
    ``sources``: only entries of these sources (``None``: every source); ``names``: only these
    exposed names (``None``: every name)."""

    sources: frozenset[str] | None = None
    names: frozenset[str] | None = None

    def covers(self, entry: CatalogEntry, name: str | None = None) -> bool:
        """Whether ``entry`` (served as ``name``, default its exposed name) falls under this
        standing grant."""
        if self.sources is not None and entry.source not in self.sources:
            return False
        return self.names is None or (entry.exposed_name if name is None else name) in self.names


class DriftPolicy(enum.StrEnum):
    """What a lookup does with a granted name whose definition changed since the grant (I10):
    ``allow`` serves it silently, ``flag`` serves it marked drifted, ``quarantine`` refuses it
    (QuarantinedNameError) until the owner re-grants it."""

    ALLOW = "allow"
    FLAG = "flag"
    QUARANTINE = "quarantine"


def _routes(session: Session, generation: Generation) -> Mapping[EntryKind, Mapping[str, CatalogEntry]]:
    """The routing table ``session`` sees of ``generation``: its view's, or the catalog's."""
    return generation.routes_for(session.view)


def grant_key(kind: EntryKind, name: str) -> str:
    """The key a session's grants use for one name: ``"<kind>:<name>"``; unique across kinds."""
    return f"{kind.value}:{name}"


_ids = itertools.count(1)


@dataclass(slots=True)
class Session:
    """One downstream agent session. ``grants`` maps grant keys to the definition digest seen
    at grant time (I10); it is replaced, never mutated. ``owner`` is a role-qualified principal
    id. ``standing`` is the session's standing grant (``follow``, declared ``explicit``), applied
    at each publication; ``followed_revision`` is the newest revision it was applied to.
    ``declared`` names the config declaration the session comes from (``None``: created over the
    API or by the front door). ``control_tools``: may call the built-in control tools."""

    id: str
    owner: str
    created_at: float
    grants: Mapping[str, str] = field(default_factory=lambda: NO_GRANTS)  # equal maps are shared
    pinned_revision: int | None = None
    token: str = field(default="", repr=False)
    #: Made on first use (:attr:`lock`): an idle session holds no lock and its waiter queue.
    _lock: anyio.Lock | None = field(default=None, repr=False, compare=False)
    drift_seen: frozenset[str] = frozenset()
    policy: GrantPolicy = GrantPolicy.CURRENT
    standing: StandingGrant | None = None
    followed_revision: int | None = None
    declared: str | None = None
    declared_digest: str = ""
    control_tools: bool = False
    #: The named view the session is bound to (``None``: the whole catalog); fixed at creation
    #: except for config-declared sessions, whose declaration may change it.
    view: str | None = None
    #: The session's own discovery mode (``all`` | ``search``; ``None``: its view's or the
    #: config's, ``reconciler/discovery.py``) and, in search mode, the tool names its
    #: ``find_tools`` calls found, oldest first (replaced, never mutated; bounded by
    #: ``DiscoveryPolicy.found_max``).
    discovery: str | None = None
    found: tuple[str, ...] = ()
    #: Served tool names or globs whose calls need an approval in this session, beside the
    #: config's ``approvals.required`` (``reconciler/approvals.py``; set over the control API).
    approval_required: tuple[str, ...] = ()
    over_bound_logged: bool = False
    #: Mirrored to the cluster store (see the module docstring); ``version`` is the store's
    #: compare-and-set version of the record this replica last wrote or read.
    shared: bool = False
    version: int = 0
    token_hash: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if self.token and not self.token_hash:
            self.token_hash = _token_hash(self.token)

    last_active_at: float | None = None  # wall clock of its newest request or name resolved (console, expiry)
    #: Requests of the session running now (the front door counts them): a session in use never
    #: expires (ADR 0032).
    in_flight: int = 0

    @property
    def lock(self) -> anyio.Lock:
        """Serializes this session's grants and refreshes (made on first use)."""
        if self._lock is None:
            self._lock = anyio.Lock()
        return self._lock

    def granted(self, kind: EntryKind, name: str) -> bool:
        """Whether ``name`` of ``kind`` is granted, whether or not the catalog has it now (O(1))."""
        return grant_key(kind, name) in self.grants


@dataclass(frozen=True, slots=True)
class Resolved:
    """A lookup that succeeded: the entry to use, and whether its definition drifted since the grant
    (always False under ``DriftPolicy.ALLOW``)."""

    entry: CatalogEntry
    drifted: bool


@dataclass(frozen=True, slots=True)
class View:
    """What one session sees of one generation: granted ∩ present, quarantined ones removed."""

    revision: int
    entries: Mapping[EntryKind, tuple[CatalogEntry, ...]]
    drifted: frozenset[str]
    digests: Mapping[EntryKind, str]  # per kind: which list_changed a change calls for

    def changed_kinds(self, other: View | None) -> set[EntryKind]:
        """The kinds whose visible list differs from ``other``'s (every kind when ``other`` is None): the
        ``list_changed`` notifications a session is owed."""
        if other is None:
            return set(EntryKind)
        return {k for k in EntryKind if self.digests[k] != other.digests[k]}


@dataclass(frozen=True, slots=True)
class Found:
    """What one ``find_tools`` call returned and did to the session's found set: the hits
    (all callable by the session, I21), the names that became visible, and the oldest names
    dropped to stay within the bound."""

    revision: int
    hits: tuple[Hit, ...]
    added: tuple[str, ...]
    dropped: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeclareOutcome:
    """What :meth:`Authority.declare` changed, by declared session name (never tokens)."""

    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    rotated: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """True when a declared session was added, updated, rotated or removed (failures alone are not a change)."""
        return bool(self.added or self.updated or self.rotated or self.removed)


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Authority:
    """The session table, grants and the hot-path checks (module docstring). Synchronous and
    single-loop: every method runs without awaiting, so a caller never sees a half-applied
    change."""

    def __init__(self, bounds: Bounds | None = None, *, drift_policy: DriftPolicy = DriftPolicy.FLAG) -> None:
        self.bounds = bounds or Bounds()
        self.drift_policy = drift_policy
        self._sessions: dict[str, Session] = {}
        self._per_owner: dict[str, int] = {}  # sessions per owner principal, transport-owned ones left out
        self._by_token_hash: dict[str, Session] = {}
        self._transport_owned: set[str] = set()
        self._declared: dict[str, str] = {}  # declared session name -> session id
        self._standing: dict[str, Session] = {}  # sessions with a standing grant, by id
        self._removed_listeners: list[Callable[[str], None]] = []
        self._changed_listeners: list[Callable[[], None]] = []
        self._shared_listeners: list[Callable[[str, bool], None]] = []
        self._token_loaders: list[Callable[[str], Awaitable[Session | None]]] = []
        #: Set by the cluster sync while the store is not confirmed within its staleness bound.
        self.unconfirmed = False
        #: The cluster sync's own clock check (``None`` without a cluster store): read on every
        #: call of a shared session, so a call can never pass in the moment between the bound
        #: running out (readiness already false) and the sync's monitor setting ``unconfirmed``.
        self.store_confirmed: Callable[[], bool] | None = None
        self._session_listeners: list[Callable[[str, Session], None]] = []
        self._in_use: list[Callable[[], Collection[str]]] = []
        #: Discovery modes and the search-mode settings (the config's; ``reconciler/discovery.py``).
        self.discovery: DiscoveryPolicy = DEFAULT_POLICY
        # Equal grant maps and views are one object shared by their sessions (``sharing.py``).
        self._grant_maps = GrantMaps()
        self._views: ViewMemo[View] = ViewMemo()

    @property
    def quota(self) -> Quota:
        """The session quota (``gateway.limits.sessions*``, ADR 0032)."""
        return session_quota(self.bounds)

    # -- listeners ---------------------------------------------------------------------------

    def on_removed(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(session_id)`` synchronously after a session is removed (deleted over
        the API, its declaration removed, its connection ended); returns a remover."""
        self._removed_listeners.append(callback)
        return lambda: self._removed_listeners.remove(callback) if callback in self._removed_listeners else None

    def on_changed(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback()`` synchronously after grants change outside a request (declared
        sessions re-applied, standing grants applied); returns a remover."""
        self._changed_listeners.append(callback)
        return lambda: self._changed_listeners.remove(callback) if callback in self._changed_listeners else None

    def on_shared_change(self, callback: Callable[[str, bool], None]) -> Callable[[], None]:
        """Call ``callback(session_id, removed)`` synchronously after a shared session changed
        here (created, granted, drift marked, removed); never for changes installed from the
        cluster store. Returns a remover."""
        self._shared_listeners.append(callback)
        return lambda: self._shared_listeners.remove(callback) if callback in self._shared_listeners else None

    def on_token_miss(self, loader: Callable[[str], Awaitable[Session | None]]) -> Callable[[], None]:
        """Ask ``loader(token_hash)`` for a session when a token is not in this table (the cluster
        store: a session another replica created a moment ago, before its event arrived here).
        Returns a remover."""
        self._token_loaders.append(loader)
        return lambda: self._token_loaders.remove(loader) if loader in self._token_loaders else None

    async def load_token(self, token: str) -> Session | None:
        """:meth:`by_token`, then, on a miss, the token-miss loaders (off the hot path: only
        unknown tokens pay for it). ``None`` if no one knows the token."""
        session = self.by_token(token)
        if session is not None or not self._token_loaders:
            return session
        digest = _token_hash(token)
        for loader in list(self._token_loaders):
            try:
                if await loader(digest) is not None:
                    return self.by_token(token)
            except Exception:
                log.exception("authority token loader failed")
        return None

    def mark_shared(self, session: Session, *, removed: bool = False) -> None:
        """Report a change of ``session`` to the shared-change listeners (no-op unless shared)."""
        if not session.shared:
            return
        for callback in list(self._shared_listeners):
            try:
                callback(session.id, removed)
            except Exception:
                log.exception("authority shared-change listener failed")

    def on_session(self, callback: Callable[[str, Session], None]) -> Callable[[], None]:
        """Call ``callback(change, session)`` (``created`` | ``removed``) synchronously for every
        session but transport-owned ones (one per downstream connection: churn, not news);
        returns a remover."""
        self._session_listeners.append(callback)
        return lambda: self._session_listeners.remove(callback) if callback in self._session_listeners else None

    def _tell_session(self, change: str, session: Session) -> None:
        for callback in list(self._session_listeners):
            try:
                callback(change, session)
            except Exception:
                log.exception("authority session listener failed")

    def _notify_changed(self) -> None:
        for callback in list(self._changed_listeners):
            try:
                callback()
            except Exception:
                log.exception("authority change listener failed")

    # -- sessions ----------------------------------------------------------------------------

    def create(
        self,
        owner: str,
        generation: Generation | None,
        *,
        policy: GrantPolicy = GrantPolicy.CURRENT,
        names: Iterable[str] = (),
        sources: Iterable[str] | None = None,
        session_id: str | None = None,
        token: str | None = None,
        control_tools: bool = False,
        transport_owned: bool = False,
        shared: bool = False,
        view: str | None = None,
        discovery: str | None = None,
        operator: bool = True,
    ) -> Session:
        """Create a session owned by the principal ``owner`` with grants per ``policy`` from
        ``generation``: ``current`` (every visible name), ``none``, ``explicit`` (``names``,
        validated as a batch) or ``follow`` (every visible name of ``sources`` — all sources when
        ``None`` or empty — plus a standing grant over them). Raises ``SessionLimitError`` at the
        session bound and ``GrantError`` for invalid names or sources. ``token`` (default: a new
        random one) is the session's bearer token on ``/mcp``. ``bounds.sessions`` bounds the
        sessions the control API and the config create; a ``transport_owned`` session (created
        for one downstream connection and removed with it) is bounded by the transport's own
        session limit instead, so a flood of connections can never use up the slots of API
        sessions (issue 10, item 6). ``shared``: mirror it to the cluster store (control-API
        sessions when a store is configured). ``view``: bind the session to that named view (its
        grants come from the view's names, and it can never reach another). ``discovery``: the
        session's own discovery mode (``all`` | ``search``; ``None``: its view's or the config's).
        ``operator``: the caller may use the sessions kept for operators; an owner's request
        passes ``False`` (the session quota, ADR 0032: ``owner`` holds at most
        ``sessions_per_principal``, owners together at most ``sessions`` less the reserve)."""
        if not transport_owned:
            self.quota.check(
                SessionLimitError,
                held=len(self._sessions) - len(self._transport_owned),
                mine=self._per_owner.get(owner, 0),
                operator=operator,
            )
        sid = session_id or f"s{next(_ids)}-{secrets.token_hex(6)}"
        if sid in self._sessions:
            raise GrantError(f"a session with id {sid} already exists")
        session = Session(
            id=sid,
            owner=owner,
            created_at=time.time(),
            token=token if token is not None else secrets.token_urlsafe(24),
            control_tools=control_tools,
            shared=shared,
            view=view,
            discovery=DiscoveryMode(discovery).value if discovery is not None else None,
        )
        if session.token_hash in self._by_token_hash:
            raise GrantError("that token is already in use by another session")
        self._apply_policy(session, policy, names, sources, generation)
        self._sessions[sid] = session
        if transport_owned:
            self._transport_owned.add(sid)
        else:
            self._count(owner, 1)
        self._by_token_hash[session.token_hash] = session
        self.mark_shared(session)
        if not transport_owned:
            self._tell_session("created", session)
        return session

    def _apply_policy(
        self,
        session: Session,
        policy: GrantPolicy,
        names: Iterable[str],
        sources: Iterable[str] | None,
        generation: Generation | None,
        *,
        standing_names: bool = False,
    ) -> None:
        """Set ``session``'s grants from scratch per ``policy`` (creation, a changed declaration).
        ``standing_names``: an ``explicit`` session whose names are granted as they appear
        (config-declared) instead of validated now."""
        scope = frozenset(s for s in (sources or ()) if s) or None
        if scope is not None and len(scope) > self.bounds.sources:
            raise GrantError(f"a follow session may name at most {self.bounds.sources} sources")
        names = list(names)
        standing: StandingGrant | None = None
        keys: list[tuple[EntryKind, str]] = []
        if policy is GrantPolicy.CURRENT and generation is not None:
            keys = self._all_visible(session, generation)
        elif policy is GrantPolicy.EXPLICIT and standing_names:
            if len(names) > self.bounds.names_per_grant:
                raise GrantError(f"a grant may name at most {self.bounds.names_per_grant} entries; got {len(names)}")
            standing = StandingGrant(names=frozenset(names))
            keys = self._covered(session, generation, standing) if generation is not None else []
        elif policy is GrantPolicy.EXPLICIT:
            keys = self._validate(session, names, generation)
        elif policy is GrantPolicy.FOLLOW:
            standing = StandingGrant(sources=scope)
            keys = self._covered(session, generation, standing) if generation is not None else []
        self._set_grants(session, keys, generation)
        session.policy = policy
        session.standing = standing
        session.followed_revision = generation.revision if generation is not None else None
        if standing is not None:
            self._standing[session.id] = session
        else:
            self._standing.pop(session.id, None)

    def get(self, session_id: str) -> Session | None:
        """The session with ``session_id``, or ``None``."""
        return self._sessions.get(session_id)

    def by_token(self, token: str) -> Session | None:
        """The session a bearer token authenticates. Looked up by the token's hash, then
        compared in constant time, so timing reveals nothing about valid tokens."""
        digest = _token_hash(token)
        session = self._by_token_hash.get(digest)
        # By hash: a session another replica created is known here by its token's hash only.
        if session is not None and secrets.compare_digest(session.token_hash.encode(), digest.encode()):
            return session
        return None

    def remove(self, session_id: str, *, announce: bool = True) -> Session | None:
        """Remove a session (its token stops authenticating at once) and tell the removal
        listeners. Removing an unknown id does nothing and returns ``None``. ``announce=False``:
        the removal came from the cluster store (not reported back to it)."""
        session = self._sessions.pop(session_id, None)
        transport_owned = session_id in self._transport_owned
        self._transport_owned.discard(session_id)
        if session is None:
            return None
        if not transport_owned:
            self._count(session.owner, -1)
        self._by_token_hash.pop(session.token_hash, None)
        if announce:
            self.mark_shared(session, removed=True)
        self._standing.pop(session_id, None)
        if session.declared is not None and self._declared.get(session.declared) == session_id:
            del self._declared[session.declared]
        for callback in list(self._removed_listeners):
            try:
                callback(session_id)
            except Exception:
                log.exception("authority removal listener failed")
        if not transport_owned:
            self._tell_session("removed", session)
        return session

    def sessions(self) -> list[Session]:
        """Every session, in creation order."""
        return list(self._sessions.values())

    def owned_by(self, owner: str) -> int:
        """How many sessions (not transport-owned) the principal ``owner`` holds: O(1)."""
        return self._per_owner.get(owner, 0)

    def _count(self, owner: str, delta: int) -> None:
        left = self._per_owner.get(owner, 0) + delta
        if left > 0:
            self._per_owner[owner] = left
        else:
            self._per_owner.pop(owner, None)  # bounded by the owners holding sessions, not by who ever came

    # -- idle expiry (ADR 0032) -----------------------------------------------------------------

    def on_in_use(self, provider: Callable[[], Collection[str]]) -> Callable[[], None]:
        """Ask ``provider()`` which sessions are in use though idle by their requests (ids of
        sessions with an open MCP connection, or of owners holding a revision) before expiring
        any; returns a remover."""
        self._in_use.append(provider)
        return lambda: self._in_use.remove(provider) if provider in self._in_use else None

    def expires(self, session: Session) -> bool:
        """Whether ``session`` is subject to idle expiry: created over the control API (not
        declared in the config, not owned by a transport connection, not shared with other
        replicas, whose use this replica cannot see) while ``api_session_idle_s`` is on."""
        return (
            self.bounds.api_session_idle_s > 0
            and session.declared is None
            and not session.shared
            and session.id not in self._transport_owned
        )

    def expires_at(self, session: Session, used: Collection[str] | None = None) -> float | None:
        """The wall-clock time ``session`` expires if it stays unused from now on; ``None`` when it
        never expires or is in use now (a request in flight, or named by an in-use provider;
        ``used``: their answer, when the caller already asked)."""
        if not self.expires(session) or session.in_flight:
            return None
        if used is None:
            used = self._used()
        if session.id in used or session.owner in used:
            return None
        return (session.last_active_at or session.created_at) + self.bounds.api_session_idle_s

    def _used(self) -> set[str]:
        used: set[str] = set()
        for provider in list(self._in_use):
            try:
                used.update(provider())
            except Exception:
                log.exception("authority in-use provider failed")
        return used

    def expire_idle(self, now: float) -> list[str]:
        """Remove every session whose :meth:`expires_at` is at or before ``now`` (wall clock);
        returns their ids. A session in use is never removed (ADR 0032)."""
        used = self._used()
        gone: list[str] = []
        for session in list(self._sessions.values()):
            at = self.expires_at(session, used)
            if at is not None and at <= now:
                log.info(
                    "session %s (owner %s) expired after %gs unused",
                    session.id,
                    session.owner,
                    self.bounds.api_session_idle_s,
                )
                self.remove(session.id)
                gone.append(session.id)
        if gone:
            telemetry.sessions_expired.add(len(gone))
        return gone

    def next_expiry(self) -> float | None:
        """The earliest :meth:`expires_at` of any session (wall clock), or ``None``."""
        used = self._used()
        return min((at for s in self._sessions.values() if (at := self.expires_at(s, used)) is not None), default=None)

    # -- sessions declared in the config -------------------------------------------------------

    def declare(self, specs: Sequence[SessionSpec], generation: Generation | None) -> DeclareOutcome:
        """Reconcile the config-declared sessions to ``specs``: create the new ones (owner
        ``config::<name>``, id ``cfg-<name>``, the declared token), re-apply the grants of those
        whose declaration changed, rotate changed tokens (the old one stops authenticating), and
        remove those no longer declared. A declaration that cannot be applied (session bound,
        a token another session uses) is logged by name and left out; the others still apply.
        Tells the change listeners when anything changed."""
        added: list[str] = []
        updated: list[str] = []
        rotated: list[str] = []
        failed: list[str] = []
        wanted = {spec.name: spec for spec in specs}
        removed = [name for name in self._declared if name not in wanted]
        for name in removed:
            self.remove(self._declared[name])
        for spec in specs:
            policy = GrantPolicy(spec.policy)
            sid = self._declared.get(spec.name)
            session = self._sessions.get(sid) if sid is not None else None
            try:
                if session is None:
                    session = self.create(
                        principal_id(CONFIG_NAMESPACE, spec.name),
                        None,
                        policy=GrantPolicy.NONE,
                        session_id=f"cfg-{spec.name}",
                        token=spec.token,
                        control_tools=spec.control_tools,
                        view=spec.view,
                        discovery=spec.discovery,
                    )
                    try:
                        self._apply_declaration(session, spec, policy, generation)
                    except GrantError:
                        self.remove(session.id)
                        raise
                    session.declared = spec.name
                    self._declared[spec.name] = session.id
                    added.append(spec.name)
                    continue
                if not secrets.compare_digest(session.token.encode(), spec.token.encode()):
                    self._rotate(session, spec.token)
                    rotated.append(spec.name)
                if session.declared_digest != spec.grants_digest:
                    self._apply_declaration(session, spec, policy, generation)
                    updated.append(spec.name)
            except (GrantError, SessionLimitError) as exc:
                log.error("config session %s was not applied: %s", spec.name, exc)
                failed.append(spec.name)
        outcome = DeclareOutcome(tuple(added), tuple(updated), tuple(rotated), tuple(removed), tuple(failed))
        if outcome.changed:
            log.info(
                "config sessions: %d added, %d updated, %d token(s) rotated, %d removed",
                len(added),
                len(updated),
                len(rotated),
                len(removed),
            )
            self._notify_changed()
        return outcome

    def declared(self) -> dict[str, Session]:
        """The config-declared sessions by declared name."""
        return {name: self._sessions[sid] for name, sid in self._declared.items() if sid in self._sessions}

    def _apply_declaration(
        self, session: Session, spec: SessionSpec, policy: GrantPolicy, generation: Generation | None
    ) -> None:
        session.view = spec.view  # before the grants: they are names of the view
        self._apply_policy(session, policy, spec.names, spec.sources, generation, standing_names=True)
        session.control_tools = spec.control_tools
        if spec.discovery != session.discovery:
            session.discovery = spec.discovery
            session.found = ()
        session.declared_digest = spec.grants_digest

    def _rotate(self, session: Session, token: str) -> None:
        if _token_hash(token) in self._by_token_hash:
            raise GrantError("that token is already in use by another session")
        self._by_token_hash.pop(session.token_hash, None)
        session.token = token
        session.token_hash = _token_hash(token)
        self._by_token_hash[session.token_hash] = session

    # -- shared sessions installed from the cluster store ------------------------------------

    def put_shared(self, record: Session, generation: Generation | None) -> Session:
        """Install the state of a shared session another replica wrote (``record``: a detached
        :class:`Session` built from the store's record), unless this replica already has that
        version or a newer one. An existing session is updated in place (bindings keep their
        reference); a standing grant is re-applied against ``generation``. Tells the change
        listeners (``list_changed`` for the affected bindings); never the shared-change ones."""
        session = self._sessions.get(record.id)
        if session is not None and session.version >= record.version:
            return session
        if session is None:
            if record.token_hash in self._by_token_hash:
                log.warning("shared session %s: its token hash is claimed by another session here", record.id)
                return record
            session = record
            self._sessions[session.id] = session
            self._count(session.owner, 1)
        else:
            if session.token_hash != record.token_hash:
                self._by_token_hash.pop(session.token_hash, None)
                session.token_hash = record.token_hash
                session.token = ""
            session.grants = record.grants
            session.drift_seen = record.drift_seen
            session.policy = record.policy
            session.standing = record.standing
            session.pinned_revision = record.pinned_revision
            session.control_tools = record.control_tools
            session.view = record.view
            session.discovery = record.discovery
            session.version = record.version
        session.shared = True
        self._by_token_hash[session.token_hash] = session
        session.followed_revision = None
        if session.standing is not None:
            self._standing[session.id] = session
            if generation is not None:
                keys = [
                    (kind, name)
                    for kind, table in _routes(session, generation).items()
                    for name, e in table.items()
                    if session.standing.covers(e, name) and grant_key(kind, name) not in session.grants
                ]
                session.followed_revision = generation.revision
                if keys:
                    self._add_bounded(session, keys, generation)
        else:
            self._standing.pop(session.id, None)
        self._notify_changed()
        return session

    # -- standing grants (follow) --------------------------------------------------------------

    def follow(self, new: Generation, previous: Generation | None) -> None:
        """A publication listener: grant every session with a standing grant the names it covers
        that ``new`` gained over ``previous`` (a session that missed a publication, e.g. one
        created from an older revision, is compared with the whole of ``new`` once). Never
        re-grants a name the session holds, so drift (I10) still applies to what it has seen.
        Synchronous: no request can observe ``new`` before the grants are in place."""
        if not self._standing:
            return
        gained: dict[str | None, list[tuple[EntryKind, str, CatalogEntry]]] = {}  # per view
        changed = False
        for session in list(self._standing.values()):
            standing = session.standing
            if standing is None:
                continue
            if previous is not None and session.followed_revision == previous.revision:
                if session.view not in gained:
                    gained[session.view] = _gained(new.routes_for(session.view), previous.routes_for(session.view))
                candidates: Iterable[tuple[EntryKind, str, CatalogEntry]] = gained[session.view]
            else:
                candidates = (
                    (kind, name, e) for kind, table in new.routes_for(session.view).items() for name, e in table.items()
                )
            keys = [
                (kind, name)
                for kind, name, e in candidates
                if standing.covers(e, name) and grant_key(kind, name) not in session.grants
            ]
            session.followed_revision = new.revision
            if keys and self._add_bounded(session, keys, new):
                changed = True
        if changed:
            self._notify_changed()

    def _covered(
        self, session: Session, generation: Generation, standing: StandingGrant
    ) -> list[tuple[EntryKind, str]]:
        return [
            (kind, name)
            for kind, table in _routes(session, generation).items()
            for name, e in table.items()
            if standing.covers(e, name)
        ]

    def _add_bounded(self, session: Session, keys: list[tuple[EntryKind, str]], generation: Generation) -> bool:
        """Add ``keys`` to a standing-grant session up to ``names_per_session`` (an automatic
        grant cannot be refused to anyone: past the bound the rest is left out and logged once)."""
        room = self.bounds.names_per_session - len(session.grants)
        if len(keys) > room:
            if not session.over_bound_logged:
                log.warning(
                    "session %s: its standing grant reached %d names (names_per_session); newer names are not granted",
                    session.id,
                    self.bounds.names_per_session,
                )
                session.over_bound_logged = True
            keys = keys[: max(0, room)]
        if not keys:
            return False
        self._set_grants(session, keys, generation, merge=True)
        return True

    # -- grants ------------------------------------------------------------------------------

    def grant(self, session: Session, names: Iterable[str], generation: Generation) -> list[str]:
        """Grant a batch of exposed names (all or nothing). A name is looked up as a tool,
        prompt, resource URI or resource template. Re-granting a drifted name accepts its new
        definition. Returns the grant keys that were added or refreshed."""
        keys = self._validate(session, list(names), generation)
        changed = self._set_grants(session, keys, generation, merge=True)
        self.mark_shared(session)
        return changed

    def revoke(self, session: Session, names: Iterable[str]) -> list[str]:
        """Take a batch of granted exposed names away (all or nothing): every kind a name is
        granted as. A session with a standing grant (``follow``, a declared ``explicit``) would
        get them back at the next publication, so it is refused; so is a name not granted.
        Returns the grant keys removed."""
        wanted = list(names)
        if len(wanted) > self.bounds.names_per_grant:
            raise GrantError(f"a revocation may name at most {self.bounds.names_per_grant} entries; got {len(wanted)}")
        if session.standing is not None:
            raise GrantError(
                "this session's standing grant (follow or declared) would grant the names again; "
                "change its sources or delete it instead"
            )
        keys: list[str] = []
        missing: list[str] = []
        for name in wanted:
            found = [grant_key(kind, name) for kind in EntryKind if grant_key(kind, name) in session.grants]
            keys.extend(found)
            if not found:
                missing.append(name)
        if missing:
            shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
            raise GrantError(f"not granted to this session: {shown}; nothing was revoked")
        gone = set(keys)
        session.grants = self._grant_maps.share({k: v for k, v in session.grants.items() if k not in gone})
        session.drift_seen = frozenset(k for k in session.drift_seen if k not in gone)
        self.mark_shared(session)
        return sorted(gone)

    def grant_all_visible(self, session: Session, generation: Generation) -> list[str]:
        """Grant every name present in ``generation`` (a session refresh)."""
        changed = self._set_grants(session, self._all_visible(session, generation), generation, merge=True)
        self.mark_shared(session)
        return changed

    def _all_visible(self, session: Session, generation: Generation) -> list[tuple[EntryKind, str]]:
        return [(kind, name) for kind, table in _routes(session, generation).items() for name in table]

    def _validate(
        self, session: Session, names: list[str], generation: Generation | None
    ) -> list[tuple[EntryKind, str]]:
        if len(names) > self.bounds.names_per_grant:
            raise GrantError(f"a grant may name at most {self.bounds.names_per_grant} entries; got {len(names)}")
        out: list[tuple[EntryKind, str]] = []
        missing: list[str] = []
        for name in names:
            if not isinstance(name, str) or not name or len(name) > 2048:
                raise GrantError("every granted name must be a non-empty string of at most 2048 characters")
            found = False
            if generation is not None:
                routes = _routes(session, generation)
                for kind in EntryKind:
                    if name in routes[kind]:
                        out.append((kind, name))
                        found = True
            if not found:
                missing.append(name)
        if missing:
            shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
            raise GrantError(f"not in the current catalog: {shown}; nothing was granted")
        return out

    def _set_grants(
        self, session: Session, keys: list[tuple[EntryKind, str]], generation: Generation | None, *, merge: bool = False
    ) -> list[str]:
        new = dict(session.grants) if merge else {}
        changed: list[str] = []
        routes = _routes(session, generation) if generation is not None else None
        for kind, name in keys:
            entry = routes[kind].get(name) if routes is not None else None
            key = grant_key(kind, name)
            digest = entry.digest if entry is not None else ""
            if new.get(key) != digest:
                changed.append(key)
            new[key] = digest
        if len(new) > self.bounds.names_per_session:
            bound = "gateway.limits.grants_per_session"
            telemetry.quota_refused.add(1, {"bound": bound})
            raise GrantLimitError(
                f"a session may hold at most {self.bounds.names_per_session} names ({bound}); this grant would make "
                f"{len(new)}; nothing was granted",
                bound=bound,
                limit=self.bounds.names_per_session,
            )
        session.grants = self._grant_maps.share(new)
        if session.drift_seen and changed:  # a re-granted name's new definition is no drift
            gone = set(changed)
            session.drift_seen = frozenset(k for k in session.drift_seen if k not in gone)
        return changed

    # -- the hot path ------------------------------------------------------------------------

    def resolve(self, session: Session, generation: Generation, kind: EntryKind, name: str) -> Resolved:
        """O(1): the entry a session may use under ``name``, or the error that says why not."""
        if session.shared and (self.unconfirmed or (self.store_confirmed is not None and not self.store_confirmed())):
            raise ClusterUnavailableError()
        key = grant_key(kind, name)
        session.last_active_at = time.time()
        granted = session.grants.get(key)
        routes = generation.catalog.routes if session.view is None else generation.routes_for(session.view)
        entry = routes[kind].get(name)
        if granted is None:
            if kind is EntryKind.RESOURCE and entry is None:
                return self._resolve_templated(session, generation, name)
            raise UnknownNameError(kind, name)
        if entry is None:
            raise UnavailableNameError(kind, name, generation.revision)
        drifted = bool(granted) and entry.digest != granted
        if drifted:
            if self.drift_policy is DriftPolicy.QUARANTINE:
                raise QuarantinedNameError(kind, name)
            if self.drift_policy is DriftPolicy.ALLOW:
                drifted = False
            elif key not in session.drift_seen:  # the hot path only pays on the first drifted call
                session.drift_seen = session.drift_seen | {key}
                self.mark_shared(session)
        return Resolved(entry, drifted)

    def _resolve_templated(self, session: Session, generation: Generation, uri: str) -> Resolved:
        """A resource URI not listed by itself may be read through a granted template."""
        for name, entry in _routes(session, generation)[EntryKind.RESOURCE_TEMPLATE].items():
            if grant_key(EntryKind.RESOURCE_TEMPLATE, name) not in session.grants:
                continue
            try:
                if UriTemplate.parse(name).match(uri) is not None:
                    return Resolved(entry, False)
            except Exception:
                continue
        raise UnknownNameError(EntryKind.RESOURCE, uri)

    def view(self, session: Session, generation: Generation) -> View:
        """Everything the session can see in ``generation`` (for lists and change detection).
        Sessions with the same grant map, named view, listed tools and drift policy share one
        (``sharing.ViewMemo``: those are all a view is made of)."""
        # Search mode lists only the pinned and the found tools; the grants still decide (I9).
        listed = self._listed_tools(session)
        key = (session.view, listed, self.drift_policy)
        shared = self._views.get(generation, session.grants, key)
        if shared is None:
            shared = self._build_view(session.grants, generation.routes_for(session.view), listed, generation.revision)
            self._views.put(generation, session.grants, key, shared)
        return shared

    def _build_view(
        self,
        grants: Mapping[str, str],
        routes: Mapping[EntryKind, Mapping[str, CatalogEntry]],
        listed: frozenset[str] | None,
        revision: int,
    ) -> View:
        entries: dict[EntryKind, list[CatalogEntry]] = {k: [] for k in EntryKind}
        drifted: set[str] = set()
        parts: dict[EntryKind, list[str]] = {k: [] for k in EntryKind}
        for key, digest in sorted(grants.items()):
            kind_s, _, name = key.partition(":")
            kind = EntryKind(kind_s)
            if listed is not None and kind is EntryKind.TOOL and name not in listed:
                continue
            entry = routes[kind].get(name)
            if entry is None:
                continue
            if digest and entry.digest != digest:
                if self.drift_policy is DriftPolicy.QUARANTINE:
                    parts[kind].append(f"{key}:quarantined")
                    continue
                if self.drift_policy is DriftPolicy.FLAG:
                    drifted.add(key)
            entries[kind].append(entry)
            flag = ":drifted" if key in drifted else ""
            parts[kind].append(f"{key}:{entry.digest}{flag}")
        return View(
            revision=revision,
            entries={k: tuple(v) for k, v in entries.items()},
            drifted=frozenset(drifted),
            digests={k: digest_parts(v) for k, v in parts.items()},
        )

    # -- search mode (ADR 0029) -----------------------------------------------------------------

    def set_discovery(self, policy: DiscoveryPolicy) -> None:
        """Apply the config's discovery settings; a change re-evaluates every session's list
        (the change listeners: ``list_changed`` where a list changed)."""
        if policy == self.discovery:
            return
        self.discovery = policy
        self._notify_changed()

    def searching(self, session: Session) -> bool:
        """Whether ``session`` is in search mode (its own mode, its view's, or the config's)."""
        return self.discovery.mode_of(session.discovery, session.view) is DiscoveryMode.SEARCH

    def _listed_tools(self, session: Session) -> frozenset[str] | None:
        """The tool names a search-mode session lists (pinned and found); ``None``: every one."""
        if not self.searching(session):
            return None
        return self.discovery.always_visible | frozenset(session.found)

    def may_call(self, session: Session, generation: Generation, name: str) -> bool:
        """Whether a ``tools/call`` of ``name`` by ``session`` on ``generation`` would be
        answered by the tool (not unknown, unavailable or quarantined): the check
        :meth:`resolve` makes, without its side effects. O(1)."""
        granted = session.grants.get(grant_key(EntryKind.TOOL, name))
        if granted is None:
            return False
        entry = _routes(session, generation)[EntryKind.TOOL].get(name)
        if entry is None:
            return False
        return not (granted and entry.digest != granted and self.drift_policy is DriftPolicy.QUARANTINE)

    def find(self, session: Session, generation: Generation, query: str, limit: int) -> Found:
        """Search ``generation``'s index of the session's view for ``query``: the ``limit`` best
        tools the session may call (I21). In search mode the hits join the session's found set
        (newest last; a hit already found moves to the end) and the oldest names past
        ``found_max`` are dropped. The generation's index is built on the first search of it."""
        index = generation.search_index(session.view)
        hits = tuple(index.search(query, limit, lambda name: self.may_call(session, generation, name)))
        if not self.searching(session):
            return Found(generation.revision, hits, (), ())
        pinned = self.discovery.always_visible
        new = [h.name for h in hits if h.name not in pinned]
        before = session.found
        fresh, known = set(new), set(before)
        kept = [n for n in before if n not in fresh] + new
        bound = self.discovery.found_max
        dropped = tuple(kept[: max(0, len(kept) - bound)])
        session.found = tuple(kept[len(dropped) :])
        added = tuple(n for n in new if n not in known)
        if dropped:
            log.info("session %s: found set at %d tools; dropped the oldest %d", session.id, bound, len(dropped))
        return Found(generation.revision, hits, added, dropped)


def _gained(
    new: Mapping[EntryKind, Mapping[str, CatalogEntry]], previous: Mapping[EntryKind, Mapping[str, CatalogEntry]]
) -> list[tuple[EntryKind, str, CatalogEntry]]:
    """(kind, name, entry) of the routing table ``new`` for each name ``previous`` did not have."""
    out: list[tuple[EntryKind, str, CatalogEntry]] = []
    for kind in EntryKind:
        old = previous[kind]
        out.extend((kind, name, e) for name, e in new[kind].items() if name not in old)
    return out
