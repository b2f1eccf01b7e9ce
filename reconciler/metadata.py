"""Untrusted metadata in the engine: admitting one upstream definition as a served entry, and
checking, across sources, what one source's text says about another's tools (I20).

``admit`` runs when a listing enters a candidate — once per definition, not per request, and
never on the call path. It computes the definition digest on the upstream's *original*
definition (so drift detection, I10, sees a poisoned change), projects the text of an untrusted
source (``projection.py``), applies the operator's overrides, and serves the result with a
provenance ``_meta`` entry (:data:`PROVENANCE_META`): source, trust, original digest, whether
the served text differs from the upstream's, and (bounded) what changed and which rules were
found. Findings and changes also become operator diagnostics with their field path; under the
``quarantine`` findings policy an entry with findings is withheld.

Costs: an unchanged relist reuses the previous listing's entry (a digest comparison, no extra
memory: listing.py passes the source's last state); a new definition of an untrusted source
costs the projection, whose per-text and per-schema memo tables (bounded) make "only the
description changed" cheap. A trusted source pays only for splicing the provenance bytes.

``cross_source`` runs in ``merge``: for each untrusted entry whose text mentions an
identifier-like name (``send_email``, ``mail__send``) that *another* source exposes, it adds a
``cross_source_reference`` finding — the "shadowing" attack, where one server's description
instructs the model about another server's tool. Per-source summaries are memoized by source
content digest, so a one-source change costs set operations on the changed source only.

Excerpts of upstream text appear only in operator diagnostics, never in the ``_meta`` sent to
clients (which could re-inject them into a model)."""

from __future__ import annotations

import itertools
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from mcp.shared.inbound import X_MCP_HEADER_KEY, find_invalid_x_mcp_header, x_mcp_header_map

from mcp_reconciler.reconciler import audit, telemetry
from mcp_reconciler.reconciler.digest import canonical_json, digest_bytes
from mcp_reconciler.reconciler.model import (
    CatalogEntry,
    Diagnostic,
    EntryKind,
    EntryProvenance,
    SourceSpec,
    SourceState,
)
from mcp_reconciler.reconciler.projection import (
    RULES,
    Budgets,
    Change,
    Finding,
    FindingsPolicy,
    Trust,
    bounded_put,
    cross_references,
    mention_paths,
    project_definition,
)

__all__ = [
    "METADATA_DIAGNOSTICS_PER_SOURCE",
    "META_LIST_MAX",
    "PROVENANCE_META",
    "Admission",
    "CrossSource",
    "admit",
    "cross_source",
    "unused_overrides",
]

PROVENANCE_META = "io.mcp-reconciler/provenance"
META_LIST_MAX = 16  # changes / findings listed in an entry's provenance _meta
METADATA_DIAGNOSTICS_PER_SOURCE = 128  # beyond this a listing reports a count (listing.py)
_PROVENANCE_MAX = 4096
_NAMED_KINDS = (EntryKind.TOOL, EntryKind.PROMPT)
_UNBOUNDED = Budgets(title=1 << 30, description=1 << 30, schema=1 << 30)


def _bounded(text: str, limit: int) -> str:
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[: max(0, limit - 3)].decode(errors="ignore") + "..."


class Admission(NamedTuple):
    """One upstream definition as the engine will serve it. ``quarantined`` entries must not be
    published; ``diagnostics`` say what the projection changed and found (with field paths).
    Immutable (a named tuple: built for every admitted definition, so cheaper than a frozen
    dataclass)."""

    entry: CatalogEntry
    quarantined: bool = False
    diagnostics: tuple[Diagnostic, ...] = ()


_PROVENANCE: dict[tuple[bool, bool, int, bool, frozenset[str]], EntryProvenance] = {}


_TRUSTED_PLAIN = EntryProvenance(Trust.TRUSTED)
_PLAIN_UNTRUSTED: dict[bool, dict[frozenset[str], EntryProvenance]] = {False: {}, True: {}}


def _provenance(
    trust: Trust, projected: bool, findings: int, quarantine: bool, mentions: frozenset[str]
) -> EntryProvenance:
    """Interned: entries with equal provenance share one object (a plain tuple key: the
    dataclass's own hash and equality are Python-level, this runs for every admitted entry)."""
    if trust is Trust.TRUSTED and not projected:
        return _TRUSTED_PLAIN
    if not projected and not findings:  # the common untrusted case: one lookup by mentions
        plain = _PLAIN_UNTRUSTED[quarantine]
        found = plain.get(mentions)
        if found is None:
            if len(plain) >= _PROVENANCE_MAX:
                plain.clear()
            found = plain[mentions] = EntryProvenance(trust, False, 0, quarantine, mentions)
        return found
    key = (trust is Trust.UNTRUSTED, projected, findings, quarantine, mentions)
    found = _PROVENANCE.get(key)
    if found is None:
        if len(_PROVENANCE) >= _PROVENANCE_MAX:
            _PROVENANCE.clear()
        found = _PROVENANCE[key] = EntryProvenance(trust, projected, findings, quarantine, mentions)
    return found


def admit(
    spec: SourceSpec,
    kind: EntryKind,
    upstream_name: str,
    exposed_name: str,
    definition: Mapping[str, Any],
    *,
    diagnostic_bytes: int = 512,
    previous: CatalogEntry | None = None,
    previous_diagnostics: tuple[Diagnostic, ...] = (),
) -> Admission:
    """Admit one validated upstream definition of ``spec``'s source (I10, I20).

    Guarantees: ``entry.digest`` is the digest of ``definition`` without ``_meta``, exactly as
    before projection existed; ``entry.raw`` is the served definition with
    ``_meta[PROVENANCE_META]`` (the upstream's own ``_meta`` keys are kept); a trusted source's
    text is served verbatim except where an override pins it; an untrusted source's text is
    projected, never its contract. Pure given its inputs.

    ``previous`` is this entry as the source's last listing admitted it under the same spec
    (the caller checks the spec digest), with its ``previous_diagnostics``: when the definition
    is unchanged (same digest, no upstream ``_meta``) it is returned as is — a relist of an
    unchanged definition costs its digest and a comparison, and keeps the same entry object (so
    every cache keyed by it keeps hitting)."""
    meta = definition.get("_meta")
    body = definition if meta is None else {k: v for k, v in definition.items() if k != "_meta"}
    raw0 = canonical_json(body)
    digest = digest_bytes(raw0)
    if (
        previous is not None
        and meta is None
        and previous.digest == digest
        and previous.kind is kind
        and previous.exposed_name == exposed_name
        and previous.source == spec.name
    ):
        return Admission(previous, False, previous_diagnostics)
    return _admit(spec, kind, upstream_name, exposed_name, body, raw0, digest, meta, diagnostic_bytes)


def _admit(
    spec: SourceSpec,
    kind: EntryKind,
    upstream_name: str,
    exposed_name: str,
    body: Mapping[str, Any],
    raw0: bytes,
    digest: str,
    meta: Any,
    diagnostic_bytes: int,
) -> Admission:
    policy = spec.policy
    trust = spec.trust
    override = policy.overrides.get(upstream_name)
    served: Mapping[str, Any] = body
    changes: tuple[Change, ...] = ()
    findings: tuple[Finding, ...] = ()
    mentions: frozenset[str] = frozenset()
    omitted = 0
    if trust is Trust.UNTRUSTED:
        served, changes, findings, mentions, omitted = project_definition(kind, body, policy.budgets)
    overridden: list[str] = []
    if override is not None:
        pinned = {f: getattr(override, f) for f in ("title", "description") if getattr(override, f) is not None}
        overridden = sorted(pinned)
        served = {**served, **pinned}
        # Pinned text is the operator's: what the upstream's text at those fields said no longer
        # reaches a model, so it is neither a change nor a finding of the served entry.
        changes = tuple(c for c in changes if c.path not in pinned)
        findings = tuple(f for f in findings if f.path not in pinned)
    quarantined = bool(findings) and trust is Trust.UNTRUSTED and policy.findings is FindingsPolicy.QUARANTINE
    projected = bool(changes) or bool(overridden)
    prov = _provenance(
        trust,
        projected,
        len(findings),
        trust is Trust.UNTRUSTED and policy.findings is FindingsPolicy.QUARANTINE,
        mentions,
    )
    body_raw = raw0 if served is body else canonical_json(served)
    if meta is None and not projected and not findings:
        # The common case, spliced without a JSON encoder: {"_meta":{...}, <the body's members>}.
        plain = _PLAIN_META.get(spec.digest)
        if plain is None:
            plain = _PLAIN_META[spec.digest] = _plain_meta(spec.name, trust)
            if len(_PLAIN_META) > 1024:
                _PLAIN_META.clear()
        meta_raw = b"".join((plain[0], digest.encode(), plain[1]))
    else:
        meta_obj = dict(meta) if isinstance(meta, Mapping) else {}
        meta_obj[PROVENANCE_META] = provenance_meta(
            spec.name, trust, digest, changes, findings, overridden=overridden, omitted=omitted
        )
        meta_raw = canonical_json(meta_obj)
    raw = (
        b'{"_meta":' + meta_raw + b"}"
        if body_raw == b"{}"
        else b"".join((b'{"_meta":', meta_raw, b",", memoryview(body_raw)[1:]))
    )
    entry = CatalogEntry(
        kind=kind,
        exposed_name=exposed_name,
        upstream_name=upstream_name,
        source=spec.name,
        raw=raw,
        digest=digest,
        size=len(raw0),
        provenance=prov,
        param_headers=param_headers(body, raw0) if kind is EntryKind.TOOL else (),
    )
    if not (changes or findings or omitted):
        return Admission(entry=entry)
    outcome = "quarantined" if quarantined else "flagged" if findings else "projected"
    telemetry.metadata_entries.add(1, {"source": spec.name, "outcome": outcome})
    if outcome != "projected":  # a decision about an untrusted definition: flagged or withheld (I20)
        audit.record(f"metadata.{outcome}", source=spec.name, name=entry.exposed_name, digest=entry.digest)
    diagnostics = entry_diagnostics(entry, changes, findings, quarantined, omitted, diagnostic_bytes)
    return Admission(entry=entry, quarantined=quarantined, diagnostics=diagnostics)


_PLAIN_META: dict[str, tuple[bytes, bytes]] = {}  # by spec digest

_X_MCP_HEADER = X_MCP_HEADER_KEY.encode()


def param_headers(tool: Mapping[str, Any], raw: bytes) -> tuple[tuple[tuple[str, ...], str], ...]:
    """``tool``'s ``x-mcp-header`` annotations as the upstream sent them (``raw`` its canonical
    bytes: a schema without the keyword is not walked). None for an invalid annotation: the
    SDK's client drops such a tool, the gateway lists it and sends no header (the upstream
    decides)."""
    if _X_MCP_HEADER not in raw:
        return ()
    schema = tool.get("inputSchema")
    if not isinstance(schema, Mapping) or find_invalid_x_mcp_header(schema) is not None:
        return ()
    return tuple(sorted(x_mcp_header_map(schema).items()))


def _plain_meta(source: str, trust: Trust) -> tuple[bytes, bytes]:
    """The bytes around the digest in an unchanged entry's provenance ``_meta`` (what
    ``canonical_json`` of :func:`provenance_meta` would give)."""
    template = canonical_json({PROVENANCE_META: provenance_meta(source, trust, "\0", (), ())})
    head, _, tail = template.partition(b"\\u0000")
    return head, tail


def provenance_meta(
    source: str,
    trust: Trust,
    digest: str,
    changes: Sequence[Change],
    findings: Sequence[Finding],
    *,
    overridden: Sequence[str] = (),
    omitted: int = 0,
) -> dict[str, Any]:
    """The ``_meta[PROVENANCE_META]`` value: plain, bounded data, no upstream excerpts."""
    out: dict[str, Any] = {
        "source": source,
        "trust": trust.value,
        "digest": digest,
        "projected": bool(changes) or bool(overridden),
    }
    if changes:
        out["changes"] = [c.as_json() for c in changes[:META_LIST_MAX]]
    if findings:
        out["findings"] = [{"path": f.path, "rule": f.rule} for f in findings[:META_LIST_MAX]]
    more = omitted + max(0, len(changes) - META_LIST_MAX) + max(0, len(findings) - META_LIST_MAX)
    if more:
        out["omitted"] = more
    if overridden:
        out["overridden"] = list(overridden)
    return out


def entry_diagnostics(
    entry: CatalogEntry,
    changes: Sequence[Change],
    findings: Sequence[Finding],
    quarantined: bool,
    omitted: int,
    limit: int,
) -> tuple[Diagnostic, ...]:
    """Operator diagnostics for one admitted entry: one for what the projection changed, one
    per finding (with its path and a sanitized excerpt), one if it was withheld."""
    label = f"{entry.kind} {entry.exposed_name!r}"
    out: list[Diagnostic] = []
    if changes:
        text = "; ".join(c.describe() for c in changes[:8])
        if len(changes) > 8:
            text += f"; and {len(changes) - 8} more"
        out.append(
            Diagnostic(
                code="metadata_projected",
                source=entry.source,
                name=entry.exposed_name,
                path=changes[0].path,
                message=_bounded(f"{label} projected: {text}", limit),
            )
        )
    for f in findings:
        out.append(
            Diagnostic(
                code="metadata_finding",
                source=entry.source,
                name=entry.exposed_name,
                path=f.path,
                message=_bounded(f"{label}: {f.rule} at {f.path}: {f.excerpt!r} ({RULES.get(f.rule, '')})", limit),
            )
        )
    if omitted:
        out.append(
            Diagnostic(
                code="metadata_finding",
                source=entry.source,
                name=entry.exposed_name,
                message=_bounded(f"{label}: {omitted} more change(s)/finding(s) not listed", limit),
            )
        )
    if quarantined:
        rules = ", ".join(sorted({f.rule for f in findings}))
        out.append(
            Diagnostic(
                code="metadata_quarantined",
                source=entry.source,
                name=entry.exposed_name,
                path=findings[0].path if findings else None,
                message=_bounded(
                    f"{label} withheld from the catalog: {len(findings)} finding(s) ({rules}) under the "
                    "'quarantine' findings policy; override its text, trust the source, or fix it upstream",
                    limit,
                ),
            )
        )
    return tuple(out)


def unused_overrides(spec: SourceSpec, names: set[str], limit: int) -> tuple[Diagnostic, ...]:
    """A diagnostic for each override naming nothing the source lists (a typo is not silent)."""
    return tuple(
        Diagnostic(
            code="metadata_override_unused",
            source=spec.name,
            name=_bounded(name, 160),
            message=_bounded(
                f"override for {name!r}: the source lists no tool, prompt or resource by that name", limit
            ),
        )
        for name in spec.policy.overrides
        if name not in names
    )


# -- across sources ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CrossSource:
    """What ``merge`` must do about cross-source references: add ``diagnostics``, leave out
    ``withheld`` entries and serve ``replaced`` ones (their provenance lists the finding). Keys
    are (kind, exposed name)."""

    diagnostics: tuple[Diagnostic, ...]
    withheld: frozenset[tuple[EntryKind, str]]
    replaced: Mapping[tuple[EntryKind, str], CatalogEntry]


# Everything below is memoized by content digests, so a merge costs work only for what changed:
# a source's mentions and names by its state digest; the index name -> owning sources by the
# digest of every source's names (descriptions change far more often than names); the hits of
# one source by (its state digest, that names digest).
_MEMO_STATES = 1024  # > the sources of a few engines in one process (tests, benchmarks)
_MENTIONS: OrderedDict[str, frozenset[str]] = OrderedDict()
_NAMES: OrderedDict[str, str] = OrderedDict()
_INDEXES: OrderedDict[tuple[str, ...], tuple[int, dict[str, frozenset[str]]]] = OrderedDict()
_HITS: OrderedDict[tuple[str, int], frozenset[str]] = OrderedDict()
_FLAGGED: dict[tuple[bytes, tuple[Finding, ...]], CatalogEntry] = {}
_EMPTY: frozenset[str] = frozenset()
_index_versions = itertools.count()


def _mentions_of(state: SourceState) -> frozenset[str]:
    mentions: set[str] = set()
    last: EntryProvenance | None = None
    for e in state.entries:
        prov = e.provenance
        if prov is not last and prov is not None:  # provenances are interned: runs share one
            last = prov
            if prov.mentions:
                mentions |= prov.mentions
    found = frozenset(mentions) if mentions else _EMPTY
    bounded_put(_MENTIONS, state.digest, found, _MEMO_STATES)
    return found


def _names_of(state: SourceState) -> str:
    names = "\0".join(f"{e.exposed_name}\0{e.upstream_name}" for e in state.entries if e.kind in _NAMED_KINDS)
    found = digest_bytes(f"{state.source}\0{names}".encode())
    bounded_put(_NAMES, state.digest, found, _MEMO_STATES)
    return found


def _index(states: Sequence[SourceState]) -> dict[str, frozenset[str]]:
    """Tool and prompt names, exposed and upstream → the sources that list them."""
    owners: dict[str, set[str]] = {}
    for st in states:
        for e in st.entries:
            if e.kind in _NAMED_KINDS:
                owners.setdefault(e.exposed_name, set()).add(st.source)
                owners.setdefault(e.upstream_name, set()).add(st.source)
    return {name: frozenset(sources) for name, sources in owners.items()}


def cross_source(
    states: Sequence[SourceState],
    tables: Mapping[EntryKind, Mapping[str, CatalogEntry]],
    *,
    diagnostic_bytes: int = 512,
) -> CrossSource | None:
    """``cross_source_reference`` findings for untrusted entries that mention, by an
    identifier-like name, a tool or prompt another source lists (a source naming its own tool
    is not shadowing, even if another source has that name too). ``tables`` (exposed name →
    entry, as merged) says which entries are served. ``None`` when there is nothing to report
    (the common case). Deterministic in its inputs."""
    get_mentions = _MENTIONS.get
    mentions = [m if (m := get_mentions(st.digest)) is not None else _mentions_of(st) for st in states]
    if not any(mentions):
        return None
    get_names = _NAMES.get
    names_key = tuple(get_names(st.digest) or _names_of(st) for st in states)
    found_index = _INDEXES.get(names_key)
    if found_index is None:
        found_index = (next(_index_versions), _index(states))
        bounded_put(_INDEXES, names_key, found_index, 4)
    version, index = found_index
    diagnostics: list[Diagnostic] = []
    withheld: set[tuple[EntryKind, str]] = set()
    replaced: dict[tuple[EntryKind, str], CatalogEntry] = {}
    for st, mentioned in zip(states, mentions, strict=True):
        if not mentioned:
            continue
        hits = _HITS.get((st.digest, version))
        if hits is None:
            hits = frozenset(t for t in mentioned if t in index and st.source not in index[t])
            bounded_put(_HITS, (st.digest, version), hits, _MEMO_STATES)
        if not hits:
            continue
        for entry in st.entries:
            prov = entry.provenance
            if prov is None or not (prov.mentions & hits):
                continue
            if tables[entry.kind].get(entry.exposed_name) is not entry:
                continue  # shadowed by a name collision: not served, nothing to withhold
            data = json.loads(entry.raw)
            data.pop("_meta", None)
            paths = mention_paths(entry.kind.value, data, _UNBOUNDED)
            others = {t: min(index[t]) for t in prov.mentions & hits}
            found_refs = cross_references({t: paths.get(t, "(text)") for t in others}, others)
            key = (entry.kind, entry.exposed_name)
            diagnostics.extend(entry_diagnostics(entry, (), found_refs, prov.quarantine, 0, diagnostic_bytes))
            if prov.quarantine:
                withheld.add(key)
            else:
                replaced[key] = _flagged(entry, found_refs)
    if not diagnostics:
        return None
    return CrossSource(tuple(diagnostics), frozenset(withheld), replaced)


def _flagged(entry: CatalogEntry, found: tuple[Finding, ...]) -> CatalogEntry:
    """``entry`` with ``found`` added to its provenance findings (memoized: merges repeat)."""
    key = (entry.raw, found)
    hit = _FLAGGED.get(key)
    if hit is not None:
        return hit
    data = json.loads(entry.raw)
    meta = data.get("_meta") if isinstance(data.get("_meta"), dict) else {}
    prov = dict(meta.get(PROVENANCE_META) or {})
    listed = list(prov.get("findings") or [])
    room = max(0, META_LIST_MAX - len(listed))
    listed += [{"path": f.path, "rule": f.rule} for f in found[:room]]
    prov["findings"] = listed
    if len(found) > room:
        prov["omitted"] = int(prov.get("omitted", 0)) + len(found) - room
    meta = {**meta, PROVENANCE_META: prov}
    data["_meta"] = meta
    assert entry.provenance is not None
    flagged = replace(
        entry,
        raw=canonical_json(data),
        provenance=_provenance(
            entry.provenance.trust,
            entry.provenance.projected,
            entry.provenance.findings + len(found),
            entry.provenance.quarantine,
            entry.provenance.mentions,
        ),
    )
    if len(_FLAGGED) >= 4096:
        _FLAGGED.clear()
    _FLAGGED[key] = flagged
    return flagged
