"""Exact-name authority (I9) and definition drift (I10) for downstream sessions.

A session may use exactly the names it was granted. Lookups answer one of four ways:
- granted and present → the entry (flagged if its definition drifted since the grant);
- granted but absent from the session's generation → ``UnavailableNameError`` ("currently
  unavailable", retryable: it works again if the name reappears);
- never granted → ``UnknownNameError`` (indistinguishable from a name that does not exist);
- granted, drifted, and the drift policy is ``quarantine`` → ``QuarantinedNameError`` until the
  owner re-grants it.
Automatic reconciliation never adds names to a session; only ``grant`` does.

Grant sets are immutable mappings swapped on change, so the hot path reads them without locks.
Grants and refreshes of one session are serialized by that session's lock."""

from __future__ import annotations

import enum
import hashlib
import itertools
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import anyio
from mcp.shared.uri_template import UriTemplate

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.digest import digest_parts
from mcp_reconciler.reconciler.errors import (
    GrantError,
    QuarantinedNameError,
    SessionLimitError,
    UnavailableNameError,
    UnknownNameError,
)
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import CatalogEntry, EntryKind


class GrantPolicy(enum.StrEnum):
    CURRENT = "current"  # every name visible when the session is created
    NONE = "none"  # nothing until the owner grants
    EXPLICIT = "explicit"  # exactly the names given at creation


class DriftPolicy(enum.StrEnum):
    ALLOW = "allow"
    FLAG = "flag"
    QUARANTINE = "quarantine"


def grant_key(kind: EntryKind, name: str) -> str:
    return f"{kind.value}:{name}"


_ids = itertools.count(1)


@dataclass(slots=True)
class Session:
    """One downstream agent session. ``grants`` maps grant keys to the definition digest seen
    at grant time (I10); it is replaced, never mutated."""

    id: str
    owner: str
    created_at: float
    grants: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    pinned_revision: int | None = None
    token: str = ""
    lock: anyio.Lock = field(default_factory=anyio.Lock, repr=False)
    drift_seen: frozenset[str] = frozenset()

    def granted(self, kind: EntryKind, name: str) -> bool:
        return grant_key(kind, name) in self.grants


@dataclass(frozen=True, slots=True)
class Resolved:
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
        if other is None:
            return set(EntryKind)
        return {k for k in EntryKind if self.digests[k] != other.digests[k]}


class Authority:
    def __init__(self, bounds: Bounds | None = None, *, drift_policy: DriftPolicy = DriftPolicy.FLAG) -> None:
        self.bounds = bounds or Bounds()
        self.drift_policy = drift_policy
        self._sessions: dict[str, Session] = {}
        self._by_token_hash: dict[str, Session] = {}
        self._transport_owned: set[str] = set()

    # -- sessions ----------------------------------------------------------------------------

    def create(
        self,
        owner: str,
        generation: Generation | None,
        *,
        policy: GrantPolicy = GrantPolicy.CURRENT,
        names: Iterable[str] = (),
        session_id: str | None = None,
        transport_owned: bool = False,
    ) -> Session:
        """A new session. ``bounds.sessions`` bounds the sessions the control API creates;
        a ``transport_owned`` session (created for one downstream connection and removed with
        it) is bounded by the transport's own session limit instead, so a flood of connections
        can never use up the slots of API sessions (issue 10, item 6)."""
        if not transport_owned and len(self._sessions) - len(self._transport_owned) >= self.bounds.sessions:
            raise SessionLimitError(f"at most {self.bounds.sessions} sessions may exist; delete unused sessions")
        sid = session_id or f"s{next(_ids)}-{secrets.token_hex(6)}"
        session = Session(id=sid, owner=owner, created_at=time.time(), token=secrets.token_urlsafe(24))
        if policy is GrantPolicy.CURRENT and generation is not None:
            self._set_grants(session, self._all_visible(generation), generation)
        elif policy is GrantPolicy.EXPLICIT:
            self._set_grants(session, self._validate(list(names), generation), generation)
        self._sessions[sid] = session
        if transport_owned:
            self._transport_owned.add(sid)
        self._by_token_hash[hashlib.sha256(session.token.encode()).hexdigest()] = session
        return session

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def by_token(self, token: str) -> Session | None:
        """The session a bearer token authenticates. Looked up by the token's hash, then
        compared in constant time, so timing reveals nothing about valid tokens."""
        session = self._by_token_hash.get(hashlib.sha256(token.encode()).hexdigest())
        if session is not None and secrets.compare_digest(session.token, token):
            return session
        return None

    def remove(self, session_id: str) -> Session | None:
        session = self._sessions.pop(session_id, None)
        self._transport_owned.discard(session_id)
        if session is not None:
            self._by_token_hash.pop(hashlib.sha256(session.token.encode()).hexdigest(), None)
        return session

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    # -- grants ------------------------------------------------------------------------------

    def grant(self, session: Session, names: Iterable[str], generation: Generation) -> list[str]:
        """Grant a batch of exposed names (all or nothing). A name is looked up as a tool,
        prompt, resource URI or resource template. Re-granting a drifted name accepts its new
        definition. Returns the grant keys that were added or refreshed."""
        keys = self._validate(list(names), generation)
        return self._set_grants(session, keys, generation, merge=True)

    def grant_all_visible(self, session: Session, generation: Generation) -> list[str]:
        """Grant every name present in ``generation`` (a session refresh)."""
        return self._set_grants(session, self._all_visible(generation), generation, merge=True)

    def _all_visible(self, generation: Generation) -> list[tuple[EntryKind, str]]:
        return [(kind, name) for kind in EntryKind for name in generation.routes[kind]]

    def _validate(self, names: list[str], generation: Generation | None) -> list[tuple[EntryKind, str]]:
        if len(names) > self.bounds.names_per_grant:
            raise GrantError(f"a grant may name at most {self.bounds.names_per_grant} entries; got {len(names)}")
        out: list[tuple[EntryKind, str]] = []
        missing: list[str] = []
        for name in names:
            if not isinstance(name, str) or not name or len(name) > 2048:
                raise GrantError("every granted name must be a non-empty string of at most 2048 characters")
            found = False
            if generation is not None:
                for kind in EntryKind:
                    if name in generation.routes[kind]:
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
        for kind, name in keys:
            entry = generation.lookup(kind, name) if generation is not None else None
            key = grant_key(kind, name)
            digest = entry.digest if entry is not None else ""
            if new.get(key) != digest:
                changed.append(key)
            new[key] = digest
        if len(new) > self.bounds.names_per_session:
            raise GrantError(
                f"a session may hold at most {self.bounds.names_per_session} names; this grant would make {len(new)}"
            )
        session.grants = MappingProxyType(new)
        session.drift_seen = frozenset(k for k in session.drift_seen if k not in set(changed))
        return changed

    # -- the hot path ------------------------------------------------------------------------

    def resolve(self, session: Session, generation: Generation, kind: EntryKind, name: str) -> Resolved:
        """O(1): the entry a session may use under ``name``, or the error that says why not."""
        key = grant_key(kind, name)
        granted = session.grants.get(key)
        entry = generation.routes[kind].get(name)
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
        return Resolved(entry, drifted)

    def _resolve_templated(self, session: Session, generation: Generation, uri: str) -> Resolved:
        """A resource URI not listed by itself may be read through a granted template."""
        for name, entry in generation.routes[EntryKind.RESOURCE_TEMPLATE].items():
            if grant_key(EntryKind.RESOURCE_TEMPLATE, name) not in session.grants:
                continue
            try:
                if UriTemplate.parse(name).match(uri) is not None:
                    return Resolved(entry, False)
            except Exception:
                continue
        raise UnknownNameError(EntryKind.RESOURCE, uri)

    def view(self, session: Session, generation: Generation) -> View:
        """Everything the session can see in ``generation`` (for lists and change detection)."""
        entries: dict[EntryKind, list[CatalogEntry]] = {k: [] for k in EntryKind}
        drifted: set[str] = set()
        parts: dict[EntryKind, list[str]] = {k: [] for k in EntryKind}
        for key, digest in sorted(session.grants.items()):
            kind_s, _, name = key.partition(":")
            kind = EntryKind(kind_s)
            entry = generation.routes[kind].get(name)
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
            revision=generation.revision,
            entries={k: tuple(v) for k, v in entries.items()},
            drifted=frozenset(drifted),
            digests={k: digest_parts(v) for k, v in parts.items()},
        )
