"""The engine's immutable values: what a source should be (``SourceSpec``), what one complete
listing of it produced (``SourceState``), and the entries it offers (``CatalogEntry``).

Everything here is frozen (I1). Mutable runtime bookkeeping (pins, connection reference counts,
source health) lives in ``runtime.py`` and ``health.py``, never on these values."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from mcp.shared.inbound import mcp_param_headers

from mcp_reconciler.reconciler.digest import digest_json, digest_parts, freeze
from mcp_reconciler.reconciler.projection import MetadataPolicy, Trust

#: What joins a source's prefix to a tool's or prompt's name: ``notes`` + ``search`` → ``notes__search``.
NAME_SEPARATOR = "__"


class EntryKind(enum.StrEnum):
    """The four kinds of catalog entry; each kind has its own namespace of exposed names."""

    TOOL = "tool"
    RESOURCE = "resource"
    RESOURCE_TEMPLATE = "resource_template"
    PROMPT = "prompt"


class SourceStatus(enum.StrEnum):
    """A source's state in a catalog: ``ready`` (listed), ``stale`` (serving its last-known-good
    entries, I2), ``failed`` (never listed, contributes nothing), ``connecting`` (no listing finished yet)."""

    READY = "ready"
    STALE = "stale"  # last listing failed; serving the last-known-good state (I2)
    FAILED = "failed"  # never listed successfully; contributes nothing
    CONNECTING = "connecting"


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """Desired state of one upstream.

    ``transport`` is opaque to the engine (the upstream layer interprets it); it is deep-frozen
    and digested so that any change to command, args, env, url or headers changes ``digest``.
    ``prefix`` is the exposed-name prefix for tools and prompts: ``None`` means the default
    ``"<name>__"``, ``""`` means no prefix, any other value is joined to the name by the
    gateway's separator (:data:`NAME_SEPARATOR`: ``prefix: tz`` serves ``tz__get_time``) unless
    ``prefix_verbatim`` says to use it exactly as written (ADR 0026). ``uri_prefix`` is
    prepended to the source's resource URIs and URI templates (``reconciler/uris.py``);
    ``None`` leaves them as the upstream sends them, and then it is not part of ``digest``
    (digests of sources without one are unchanged). ``metadata`` is how the source's tool/prompt/resource
    text is treated (I20): ``None`` means the defaults, with trust by transport (remote
    ``http``/``sse`` untrusted, local trusted); when set it is part of ``digest``, so a change
    of trust, budgets, findings policy or overrides re-reads the source."""

    name: str
    transport: Mapping[str, Any] = field(default_factory=dict)
    prefix: str | None = None
    watch: tuple[str, ...] = ()
    poll_seconds: float | None = None
    uri_prefix: str | None = None
    metadata: MetadataPolicy | None = None
    prefix_verbatim: bool = False
    digest: str = field(default="", compare=False)
    trust: Trust = field(default=Trust.TRUSTED, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "transport", freeze(dict(self.transport)))
        object.__setattr__(self, "watch", tuple(self.watch))
        # Whether this source's metadata is served verbatim or projected (I20); derived, kept
        # as a field because admission reads it for every entry.
        object.__setattr__(self, "trust", self.policy.trust_for(self.transport.get("kind")))
        if not self.digest:
            parts: dict[str, Any] = {
                "name": self.name,
                "transport": self.transport,
                "prefix": self.prefix,
                "watch": self.watch,
            }
            if self.uri_prefix:
                parts["uri_prefix"] = self.uri_prefix
            if self.prefix_verbatim:
                parts["prefix_verbatim"] = True
            if self.metadata is not None:
                parts["metadata"] = self.metadata.as_json()
            object.__setattr__(self, "digest", digest_json(parts))

    @property
    def effective_prefix(self) -> str:
        """What precedes a tool's or prompt's name: ``"<name>__"`` by default, ``""`` for an empty
        ``prefix``, ``"<prefix>__"`` for another, or the ``prefix`` as written when verbatim."""
        if self.prefix is None:
            return f"{self.name}{NAME_SEPARATOR}"
        if not self.prefix or self.prefix_verbatim:
            return self.prefix
        return f"{self.prefix}{NAME_SEPARATOR}"

    @property
    def policy(self) -> MetadataPolicy:
        """The metadata policy in force (the defaults when none was given)."""
        return self.metadata if self.metadata is not None else _DEFAULT_POLICY


_DEFAULT_POLICY = MetadataPolicy()


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """Desired state of one session declared in the config (``sessions:``), reconciled like the
    sources: a reload adds, updates or removes it (``Authority.declare``).

    ``token`` is the session's bearer token for ``/mcp`` (from ``${VAR}``): a secret, so it is
    kept out of ``repr`` and never logged. ``policy`` is ``current`` | ``none`` | ``explicit`` |
    ``follow``; ``names`` are the exposed names an ``explicit`` session is granted (each as soon
    as the catalog has it); ``sources`` scope a ``follow`` session (empty: every source).
    ``control_tools`` lets the session call the built-in ``gateway_status``/``gateway_refresh``
    tools (with the owner's sanitized status). ``view`` binds it to a named view (it sees and
    calls only that view's names, ADR 0026). ``grants_digest`` covers everything but the token:
    when it changes the session's grants are re-applied; a token change alone only rotates it."""

    name: str
    token: str = field(repr=False)
    policy: str = "current"
    names: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    control_tools: bool = False
    view: str | None = None
    discovery: str | None = None  # all | search (None: the view's or the config's; ADR 0029)

    @property
    def grants_digest(self) -> str:
        """A digest of the declaration without its token."""
        data: dict[str, Any] = {
            "policy": self.policy,
            "names": list(self.names),
            "sources": list(self.sources),
            "control_tools": self.control_tools,
        }
        if self.view is not None:
            data["view"] = self.view
        if self.discovery is not None:
            data["discovery"] = self.discovery
        return digest_json(data)


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One operator-facing finding (rejected entry, name collision, stale source, ...).

    ``message`` is bounded by ``Bounds.diagnostic_bytes`` at construction sites and never
    carries secrets; clients see only the stable ``code``. ``path`` locates a metadata finding
    or change inside the entry's definition (e.g. ``inputSchema.properties.path.description``)."""

    code: str
    message: str
    source: str | None = None
    name: str | None = None
    path: str | None = None


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One tool, resource, resource template or prompt as one source offers it.

    The upstream's definition is kept as canonical JSON bytes (``raw``): immutable by nature
    (I1), compact, and invisible to the garbage collector — a 10,000-entry catalog of nested
    dicts made every full collection pause for ~25 ms, bytes make it ~4 ms. ``definition``
    decodes a read-only copy on demand. ``digest`` covers everything but ``_meta`` (I10) of the
    definition *as the upstream sent it*; ``raw`` is what is served: for an untrusted source the
    projected definition (I20), with operator overrides, and always a provenance ``_meta``
    (``metadata.PROVENANCE_META``). So a poisoned change upstream is still a drift, while what
    reaches a model is the projection. ``provenance`` summarizes the latter for the engine."""

    kind: EntryKind
    exposed_name: str
    upstream_name: str
    source: str
    raw: bytes
    digest: str
    size: int = 0  # canonical JSON bytes of the digested definition, for the candidate byte bound
    provenance: EntryProvenance | None = None
    #: A tool's ``x-mcp-header`` annotations (argument path → header token) in its input schema
    #: *as the upstream sent it* (a projection or override may change the served schema, never
    #: what the upstream checks); empty for most tools and every other kind.
    param_headers: tuple[tuple[tuple[str, ...], str], ...] = ()

    def call_headers(self, arguments: Mapping[str, Any] | None) -> dict[str, str]:
        """The ``Mcp-Param-*`` headers a call of this tool with ``arguments`` carries upstream (a
        2026-era upstream refuses a call of an annotated tool without them, ``HeaderMismatch``),
        mirrored as the SDK's client mirrors them."""
        if not self.param_headers:
            return {}
        return mcp_param_headers(dict(self.param_headers), arguments or {})

    @property
    def definition(self) -> Mapping[str, Any]:
        """The definition as read-only JSON-like data (decoded on each access; callers cache)."""
        return freeze(json.loads(self.raw))  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class EntryProvenance:
    """How an entry's served text relates to its upstream's (I20). Interned: entries with equal
    provenance share one object. ``mentions`` are identifier-like tokens of the served text (an
    untrusted source's), checked against other sources' names when sources are merged;
    ``quarantine`` says the source's findings policy withholds entries with findings."""

    trust: Trust
    projected: bool = False
    findings: int = 0
    quarantine: bool = False
    mentions: frozenset[str] = frozenset()


@runtime_checkable
class Connection(Protocol):
    """A live upstream connection, owned by the runtime's reference counts once published.

    ``aclose`` is called exactly once by the runtime (I14), after no generation that
    references the connection can start or run an operation on it (I4)."""

    @property
    def connection_id(self) -> str:
        """An id unique within the process, stable for the connection's life (logs, status, ref counts)."""

    async def aclose(self) -> None:
        """Close the connection and release its transport. The runtime calls it exactly once (I14),
        bounded by ``CONNECTION_CLOSE_TIMEOUT_S``, and logs what it raises."""


@dataclass(frozen=True, slots=True)
class SourceState:
    """The immutable result of listing one source completely at one time (I2).

    ``digest`` is the source's content digest: spec, watched-input fingerprint, the connection
    serving it, its status (ready/stale/failed), and every entry's definition digest. A source
    turning stale therefore mints one revision (its provenance changed: I11), while repeated
    failures with a changing error text do not (``error``/``error_at`` are outside the digest)."""

    source: str
    spec_digest: str
    entries: tuple[CatalogEntry, ...]
    built_at: float
    connection: Connection | None = None
    diagnostics: tuple[Diagnostic, ...] = ()
    inputs_digest: str = ""
    status: SourceStatus = SourceStatus.READY
    error: str | None = None
    error_at: float | None = None
    digest: str = field(default="", compare=False)
    size: int = field(default=0, init=False, compare=False, repr=False)  # sum of entry sizes

    def __post_init__(self) -> None:
        # Summed once here, not by every merge that reuses this state (one per cycle per source).
        object.__setattr__(self, "size", sum(e.size for e in self.entries))
        if not self.digest:
            conn = self.connection.connection_id if self.connection is not None else ""
            object.__setattr__(
                self,
                "digest",
                digest_parts(
                    [self.source, self.spec_digest, self.inputs_digest, conn, self.status.value]
                    + [f"{e.kind}:{e.exposed_name}:{e.digest}" for e in self.entries]
                ),
            )

    def marked(self, status: SourceStatus, error: str | None, at: float) -> SourceState:
        """This state with new health, sharing entries and connection (structural sharing)."""
        return SourceState(
            source=self.source,
            spec_digest=self.spec_digest,
            entries=self.entries,
            built_at=self.built_at,
            connection=self.connection,
            diagnostics=self.diagnostics,
            inputs_digest=self.inputs_digest,
            status=status,
            error=error,
            error_at=at,
        )
