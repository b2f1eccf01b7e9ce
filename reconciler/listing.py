"""Complete, validated listings of one upstream (I2, I13).

Every page of tools, resources, resource templates and prompts is fetched with raw result
models, so one malformed entry is rejected on its own (with a diagnostic) instead of failing
the whole page; the rest of the source survives. Structural problems that make the listing
untrustworthy — too many pages, a cursor loop, too many entries or bytes — fail the whole
source, which then keeps its last-known-good state (I2). The entry and byte bounds apply while
the list is read (ADR 0025): a page that would pass ``entries_per_generation`` is refused before
any of its entries is validated and no further page is asked for, and the channel refuses a
page larger than ``bytes_per_candidate`` before parsing it (``reconciler/stdio_peer.py``).

A valid entry is then admitted (``metadata.admit``, I20): an untrusted source's text is
projected, findings and changes become diagnostics (at most
``METADATA_DIAGNOSTICS_PER_SOURCE`` per listing, then a count), and an entry with findings under
the quarantine policy is left out. The description byte bound (I13) applies first, to every
source: an over-long description is rejected, not truncated — the bound protects the gateway,
the projection's budget (smaller, in characters) shapes what reaches a model."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from mcp import MCPError
from mcp_types import METHOD_NOT_FOUND
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.catalog import EXPOSED_NAME, bounded, exposed_name_for
from mcp_reconciler.reconciler.errors import SourceReadError
from mcp_reconciler.reconciler.metadata import METADATA_DIAGNOSTICS_PER_SOURCE, admit, unused_overrides
from mcp_reconciler.reconciler.model import CatalogEntry, Diagnostic, EntryKind, SourceSpec, SourceState
from mcp_reconciler.reconciler.sliced_json import Slices

_URI_MAX = 2048
_URI_BAD = re.compile(r"[\s\x00-\x1f\x7f]")


class _RawPage(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    next_cursor: str | None = Field(default=None, alias="nextCursor")
    tools: list[Any] | None = None
    resources: list[Any] | None = None
    resource_templates: list[Any] | None = Field(default=None, alias="resourceTemplates")
    prompts: list[Any] | None = None


@dataclass(frozen=True, slots=True)
class _KindSpec:
    kind: EntryKind
    field: str
    model: type[BaseModel]
    name_field: str
    request: Callable[[types.PaginatedRequestParams | None], Any]


KINDS: tuple[_KindSpec, ...] = (
    _KindSpec(EntryKind.TOOL, "tools", types.Tool, "name", lambda p: types.ListToolsRequest(params=p)),
    _KindSpec(EntryKind.RESOURCE, "resources", types.Resource, "uri", lambda p: types.ListResourcesRequest(params=p)),
    _KindSpec(
        EntryKind.RESOURCE_TEMPLATE,
        "resource_templates",
        types.ResourceTemplate,
        "uri_template",
        lambda p: types.ListResourceTemplatesRequest(params=p),
    ),
    _KindSpec(EntryKind.PROMPT, "prompts", types.Prompt, "name", lambda p: types.ListPromptsRequest(params=p)),
)

SendRequest = Callable[[Any, type[_RawPage]], Awaitable[_RawPage]]


@dataclass(frozen=True, slots=True)
class Listing:
    """One complete listing of a source: the admitted entries, why anything was rejected or changed,
    and how many pages were fetched."""

    entries: tuple[CatalogEntry, ...]
    diagnostics: tuple[Diagnostic, ...]
    pages: int


def capability_kinds(capabilities: types.ServerCapabilities | None) -> tuple[EntryKind, ...]:
    """The kinds a server says it offers (absent capability → not listed)."""
    if capabilities is None:
        return tuple(k.kind for k in KINDS)
    kinds: list[EntryKind] = []
    if capabilities.tools is not None:
        kinds.append(EntryKind.TOOL)
    if capabilities.resources is not None:
        kinds += [EntryKind.RESOURCE, EntryKind.RESOURCE_TEMPLATE]
    if capabilities.prompts is not None:
        kinds.append(EntryKind.PROMPT)
    return tuple(kinds)


async def list_source(
    send: SendRequest,
    spec: SourceSpec,
    bounds: Bounds,
    kinds: tuple[EntryKind, ...] | None = None,
    previous: SourceState | None = None,
) -> Listing:
    """List every page of every kind ``kinds`` (default: all four) through ``send``.

    ``send(request, result_type)`` is e.g. ``client.session.send_request``. Raises
    SourceReadError when the listing as a whole cannot be trusted. ``previous`` is the source's
    last state: its entries are reused for unchanged definitions under the same spec (I20: a
    relist does not project again)."""
    reuse = _Reuse(previous, spec)
    wanted = kinds if kinds is not None else tuple(k.kind for k in KINDS)
    entries: list[CatalogEntry] = []
    diagnostics: list[Diagnostic] = []
    metadata_diags = 0
    listed: set[str] = set()
    pages = 0
    total_bytes = 0
    slices = Slices()
    for kspec in KINDS:
        if kspec.kind not in wanted:
            continue
        seen: set[str] = set()
        cursor: str | None = None
        cursors: set[str] = set()
        while True:
            pages += 1
            if pages > bounds.pages_per_source:
                raise SourceReadError(
                    f"listing exceeded {bounds.pages_per_source} pages",
                    detail=f"source {spec.name}: more than {bounds.pages_per_source} list pages",
                    cause_kind="bound_exceeded",
                )
            params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
            try:
                page = await send(kspec.request(params), _RawPage)
            except MCPError as exc:
                # A server may advertise resources but not implement templates (or vice versa):
                # "method not found" on a first page means "offers none of this kind".
                if exc.error.code == METHOD_NOT_FOUND and cursor is None:
                    break
                raise
            raws = getattr(page, kspec.field) or []
            if len(entries) + len(raws) > bounds.entries_per_generation:
                # Checked before any entry is validated: nothing past the bound is looked at,
                # and no further page is asked for (ADR 0025).
                raise _too_many(spec, bounds)
            for raw in raws:
                # Validating 10,000 entries takes 100 ms or more (a schema check alone can take
                # 1 ms): the loop gets a turn every few ms (a tick is a clock read).
                await slices.tick()
                entry, diags = check_entry(kspec, raw, spec, bounds, reuse)
                for diag in diags:
                    if diag.code.startswith("metadata_"):
                        metadata_diags += 1
                        if metadata_diags > METADATA_DIAGNOSTICS_PER_SOURCE:
                            continue
                    diagnostics.append(diag)
                if isinstance(raw, Mapping):
                    name = raw.get("uriTemplate" if kspec.kind is EntryKind.RESOURCE_TEMPLATE else kspec.name_field)
                    if isinstance(name, str):
                        listed.add(name)
                if entry is None:
                    continue
                if entry.upstream_name in seen:
                    diagnostics.append(
                        _diag(
                            "duplicate_entry",
                            spec,
                            entry.upstream_name,
                            f"{kspec.kind} listed twice; kept the first",
                            bounds,
                        )
                    )
                    continue
                seen.add(entry.upstream_name)
                entries.append(entry)
                total_bytes += entry.size
                if total_bytes > bounds.bytes_per_candidate:
                    raise SourceReadError(
                        f"listing stopped at bytes_per_candidate ({bounds.bytes_per_candidate} bytes of definitions)",
                        detail=f"source {spec.name}: definitions too large",
                        cause_kind="bound_exceeded",
                    )
            cursor = page.next_cursor
            if not cursor:
                break
            if cursor in cursors:
                raise SourceReadError(
                    "listing returned a repeated page cursor",
                    detail=f"source {spec.name}: cursor loop",
                    cause_kind="protocol",
                )
            cursors.add(cursor)
    if metadata_diags > METADATA_DIAGNOSTICS_PER_SOURCE:
        hidden = metadata_diags - METADATA_DIAGNOSTICS_PER_SOURCE
        message = f"{hidden} more metadata diagnostic(s) not listed"
        diagnostics.append(_diag("metadata_diagnostics_omitted", spec, None, message, bounds))
    if spec.policy.overrides:
        diagnostics.extend(unused_overrides(spec, listed, bounds.diagnostic_bytes))
    return Listing(entries=tuple(entries), diagnostics=tuple(diagnostics), pages=pages)


def _too_many(spec: SourceSpec, bounds: Bounds) -> SourceReadError:
    return SourceReadError(
        f"listing stopped at entries_per_generation ({bounds.entries_per_generation} entries)",
        detail=f"source {spec.name}: more than {bounds.entries_per_generation} entries listed",
        cause_kind="bound_exceeded",
    )


def _diag(code: str, spec: SourceSpec, name: str | None, message: str, bounds: Bounds) -> Diagnostic:
    shown = bounded(name, 160) if name is not None else None
    return Diagnostic(code=code, source=spec.name, name=shown, message=bounded(message, bounds.diagnostic_bytes))


def validate_entry(
    kspec: _KindSpec, raw: Any, spec: SourceSpec, bounds: Bounds
) -> tuple[CatalogEntry | None, Diagnostic | None]:
    """Validate and admit one raw upstream entry (I13, I20). Returns (entry, None), or (None,
    the reason), or (entry, its first metadata diagnostic); :func:`check_entry` has them all."""
    entry, diags = check_entry(kspec, raw, spec, bounds)
    return entry, (diags[0] if diags else None)


class _Reuse:
    """The previous listing's entries and metadata diagnostics, by (kind, exposed name), when
    it was made under the same spec (otherwise nothing is reused: the policy may differ)."""

    __slots__ = ("diagnostics", "entries")

    def __init__(self, previous: SourceState | None, spec: SourceSpec) -> None:
        self.entries: dict[tuple[EntryKind, str], CatalogEntry] = {}
        self.diagnostics: dict[str, tuple[Diagnostic, ...]] = {}
        if previous is None or previous.spec_digest != spec.digest:
            return
        self.entries = {(e.kind, e.exposed_name): e for e in previous.entries}
        grouped: dict[str, list[Diagnostic]] = {}
        for d in previous.diagnostics:
            if d.name is not None and d.code.startswith("metadata_") and d.code != "metadata_override_unused":
                grouped.setdefault(d.name, []).append(d)
        self.diagnostics = {name: tuple(ds) for name, ds in grouped.items()}


_NO_REUSE = _Reuse(None, SourceSpec(name="-"))


def check_entry(
    kspec: _KindSpec, raw: Any, spec: SourceSpec, bounds: Bounds, reuse: _Reuse = _NO_REUSE
) -> tuple[CatalogEntry | None, tuple[Diagnostic, ...]]:
    """Validate one raw upstream entry (I13) and admit it (I20): (entry or None, diagnostics).
    ``None`` with an ``invalid_entry`` diagnostic for an invalid entry, ``None`` with a
    ``metadata_quarantined`` one for an entry withheld by the findings policy."""
    entry, diag = _validate(kspec, raw, spec, bounds)
    if diag is not None:
        return None, (diag,)
    assert entry is not None
    name, definition = entry
    exposed = exposed_name_for(spec, kspec.kind, name)
    admission = admit(
        spec,
        kspec.kind,
        name,
        exposed,
        definition,
        diagnostic_bytes=bounds.diagnostic_bytes,
        previous=reuse.entries.get((kspec.kind, exposed)),
        previous_diagnostics=reuse.diagnostics.get(exposed, ()),
    )
    return (None if admission.quarantined else admission.entry), admission.diagnostics


def _validate(
    kspec: _KindSpec, raw: Any, spec: SourceSpec, bounds: Bounds
) -> tuple[tuple[str, dict[str, Any]] | None, Diagnostic | None]:
    if not isinstance(raw, Mapping):
        return None, _diag("invalid_entry", spec, None, f"{kspec.kind} entry is not an object", bounds)
    raw_name = raw.get("uriTemplate" if kspec.kind is EntryKind.RESOURCE_TEMPLATE else kspec.name_field)
    label = raw_name if isinstance(raw_name, str) else None
    try:
        model = kspec.model.model_validate(raw)
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) or "(entry)" for e in exc.errors()[:5])
        return None, _diag("invalid_entry", spec, label, f"{kspec.kind} rejected: invalid field(s) {fields}", bounds)
    name = getattr(model, kspec.name_field)
    assert isinstance(name, str)
    problem = _name_problem(kspec.kind, spec, name, bounds)
    if problem is None:
        desc = getattr(model, "description", None)
        if isinstance(desc, str) and len(desc.encode()) > bounds.description_bytes:
            problem = f"description is {len(desc.encode())} bytes, over the {bounds.description_bytes}-byte bound"
    if problem is None and kspec.kind is EntryKind.TOOL:
        problem = _schema_problem(model)
    if problem is not None:
        return None, _diag("invalid_entry", spec, name, f"{kspec.kind} rejected: {problem}", bounds)
    definition = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return (name, definition), None


def _name_problem(kind: EntryKind, spec: SourceSpec, name: str, bounds: Bounds) -> str | None:
    if kind in (EntryKind.RESOURCE, EntryKind.RESOURCE_TEMPLATE):
        if not name or len(name) > _URI_MAX or _URI_BAD.search(name):
            return f"URI must be 1..{_URI_MAX} characters without whitespace or control characters"
        return None
    exposed = spec.effective_prefix + name
    if not name or not EXPOSED_NAME.fullmatch(name):
        return "name must match [A-Za-z0-9_.-]+"
    if len(exposed) > bounds.name_chars:
        return f"exposed name is {len(exposed)} characters, over the {bounds.name_chars}-character bound"
    return None


def _schema_problem(tool: BaseModel) -> str | None:
    for field_name in ("input_schema", "output_schema"):
        schema = getattr(tool, field_name, None)
        if schema is None:
            continue
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"{field_name} must be a JSON Schema object with type 'object'"
        try:
            canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError):
            return f"{field_name} is not JSON-serializable"
        problem = _check_schema(canonical)
        if problem is not None:
            return f"{field_name} is not a valid JSON Schema ({problem})"
    return None


@functools.lru_cache(maxsize=4096)
def _check_schema(canonical: str) -> str | None:
    """Meta-validation costs ~1 ms per schema; re-lists and tools sharing a schema hit the cache."""
    try:
        Draft202012Validator.check_schema(json.loads(canonical))
    except SchemaError as exc:
        return bounded(str(exc.message), 120)
    return None
