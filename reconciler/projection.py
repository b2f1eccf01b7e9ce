"""The projection of untrusted metadata: what an upstream tells the model, made safe to forward
without changing what it means as a contract (I20).

An upstream's tool, prompt and resource definitions go, through the gateway, straight into an
agent's model context. For a source the operator does not trust, every *human/model-facing text
field* is projected before it is served:

* **invisible and control characters are removed** — the Unicode tag block (U+E0000..E007F, the
  "ASCII smuggling" channel), zero-width characters, bidi embeddings/overrides/isolates and
  marks, C0/C1 controls except newline and tab, and a few other invisible format characters;
  each removal is counted per category (:class:`Change`);
* **a length budget per field** (:class:`Budgets`, in code points) cuts what is left, marking the
  cut with :data:`TRUNCATION_MARK`;
* **findings** (:class:`Finding`) report instruction-like content with the JSON field path:
  hidden blocks (``<IMPORTANT>``, ``<!-- -->``, chat-template tokens), "ignore previous
  instructions", "do not tell the user", references to credentials and secret files, text
  smuggled in tag characters, and — given the names other sources expose — references to other
  sources' tools. Detection runs on the text with *every* invisible character removed (so a
  zero-width split of a trigger word is caught) and on its NFKC form (full-width and
  mathematical letters).

**Contracts are kept.** Only these keys are projected: a definition's ``title`` and
``description``; a resource's or template's ``name`` (display text — the URI is the identifier);
``annotations.title``; a prompt argument's ``title``/``description``; and, inside a JSON Schema,
``title``, ``description`` and ``$comment`` at every schema position (``properties``, ``items``,
``prefixItems``, ``anyOf``/``oneOf``/``allOf``, ``not``/``if``/``then``/``else``, ``$defs``,
``definitions``, ``patternProperties``, ``additionalProperties``, ``dependentSchemas`` …). The
walk follows schema *keywords*, so a property named ``description`` stays a property. Types,
``required``, ``enum``/``const`` (byte for byte, zero-width characters included), ``default``,
``examples``, formats, patterns, ``$ref``/``$id``, unknown keywords and every property *name*
are never altered: they are data and structure, and a validator depends on them. ``examples``
are data too (an example value with a zero-width character is a different value), so they are
kept; like the other data positions (enum/const/default values, property names, prompt
argument names, unknown keywords) they are still *scanned* for findings.

Detection is heuristic and documented as such (adr/0010): it cannot see semantic injection in
plain words, homoglyph spellings NFKC does not fold, text in images, or anything in tool results.

ZWNJ/ZWJ (U+200C/D) are part of the spelling of Persian, Indic and other scripts and of emoji
sequences: one joiner between two non-ASCII letters (or emoji) is kept; anywhere else, or in a
run, it is removed. A variation selector right after a base character is kept (emoji and CJK
ideographic variants); a second one in a row (the "emoji smuggling" channel) is removed.
LRM/RLM/ALM are removed: they only move neutral characters on screen, the logical text a model
reads is unchanged, and they can carry hidden bits.

What one text becomes (characters, budget, rules) is ``projection_text.py``; this module walks
definitions and schemas. Everything here is pure: no I/O, no clock, no global state but bounded
memo tables of pure functions. The same input always gives the same :class:`Projection`, and projecting a projection
changes nothing (idempotence, tested with hypothesis)."""

from __future__ import annotations

import enum
import json
import marshal
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from mcp_reconciler.reconciler.digest import freeze
from mcp_reconciler.reconciler.projection_text import (
    MAX_MENTIONS,
    MEMO_LONG_MAX,
    MEMO_MAX,
    MEMO_TEXT_MAX,
    RULES,
    TRUNCATION_MARK,
    bounded_put,
    clean_text,
    compute_text,
    identifier_like,
    memo_put,
    project_text,
    sanitize_excerpt,
    scan_data_text,
)

__all__ = [
    "DEFAULT_BUDGETS",
    "MIN_BUDGET",
    "RULES",
    "TRUNCATION_MARK",
    "Budgets",
    "Change",
    "Finding",
    "FindingsPolicy",
    "MetadataPolicy",
    "Override",
    "Projection",
    "Trust",
    "bounded_put",
    "clean_text",
    "cross_references",
    "format_path",
    "identifier_like",
    "mention_paths",
    "project",
    "project_definition",
    "sanitize_excerpt",
]

MAX_FINDINGS = 64  # per definition; the rest are counted, not listed
MAX_CHANGES = 64
MAX_DEPTH = 64  # schema nesting projected; deeper text is left as is and reported
MIN_BUDGET = 64  # a budget must leave room for the truncation mark


# -- policy values ------------------------------------------------------------------------------


class Trust(enum.StrEnum):
    """Whether a source's metadata is served verbatim (``trusted``) or projected first (``untrusted``, I20)."""

    TRUSTED = "trusted"  # served verbatim (operator overrides still apply)
    UNTRUSTED = "untrusted"  # projected


class FindingsPolicy(enum.StrEnum):
    """What happens to an untrusted entry with findings: ``flag`` serves it projected and reports them,
    ``quarantine`` withholds it from the catalog."""

    FLAG = "flag"  # serve the projected entry, report the findings
    QUARANTINE = "quarantine"  # withhold an entry with findings from the catalog


@dataclass(frozen=True, slots=True)
class Budgets:
    """Length budgets in code points (not bytes: a CJK sentence should not get a third of the
    room an English one gets). ``title`` covers titles, ``annotations.title`` and a resource's
    display ``name``; ``description`` a definition's own description; ``schema`` every text inside
    a JSON Schema and a prompt argument's title/description."""

    title: int = 256
    description: int = 4096
    schema: int = 1024

    def __post_init__(self) -> None:
        for name in ("title", "description", "schema"):
            if getattr(self, name) < MIN_BUDGET:
                raise ValueError(f"budget {name} must be at least {MIN_BUDGET} code points")


DEFAULT_BUDGETS = Budgets()


@dataclass(frozen=True, slots=True)
class Override:
    """Operator-pinned text for one named entry: served instead of the upstream's (trusted text,
    not projected). Drift of the upstream's own text is still detected (I10)."""

    title: str | None = None
    description: str | None = None


@dataclass(frozen=True, slots=True)
class MetadataPolicy:
    """How one source's metadata is treated. ``trust=None`` means "by transport": remote
    (``http``/``sse``) sources are untrusted, local ones (stdio, in-process) trusted.
    ``overrides`` maps an upstream name (tool/prompt name, resource URI or URI template) to
    pinned text."""

    trust: Trust | None = None
    budgets: Budgets = DEFAULT_BUDGETS
    findings: FindingsPolicy = FindingsPolicy.FLAG
    overrides: Mapping[str, Override] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", MappingProxyType(dict(sorted(self.overrides.items()))))

    def trust_for(self, transport_kind: object) -> Trust:
        """The effective trust for a source with this transport kind."""
        if self.trust is not None:
            return self.trust
        return Trust.UNTRUSTED if transport_kind in ("http", "sse") else Trust.TRUSTED

    def as_json(self) -> dict[str, Any]:
        """Plain data for digests (a change of any of it changes the source's spec digest)."""
        return {
            "trust": None if self.trust is None else self.trust.value,
            "budgets": [self.budgets.title, self.budgets.description, self.budgets.schema],
            "findings": self.findings.value,
            "overrides": {k: [o.title, o.description] for k, o in self.overrides.items()},
        }


# -- results ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    """One alteration of one text field. ``removed`` counts removed characters per category
    (``tag``, ``zero_width``, ``bidi``, ``control``, ``variation_selector``, ``invisible``);
    ``truncated`` is (length before, length after) in code points, after removal."""

    path: str
    removed: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    truncated: tuple[int, int] | None = None

    def describe(self) -> str:
        """One line for operators: the path, the invisible characters removed by category, any truncation."""
        parts = []
        if self.removed:
            total = sum(self.removed.values())
            detail = ", ".join(f"{k} {v}" for k, v in sorted(self.removed.items()))
            parts.append(f"removed {total} invisible character(s) ({detail})")
        if self.truncated is not None:
            parts.append(f"truncated from {self.truncated[0]} to {self.truncated[1]} characters")
        return f"{self.path}: " + "; ".join(parts)

    def as_json(self) -> dict[str, Any]:
        """The change as plain JSON data (``path``, and ``removed``/``truncated`` only when present)."""
        out: dict[str, Any] = {"path": self.path}
        if self.removed:
            out["removed"] = dict(self.removed)
        if self.truncated is not None:
            out["truncated"] = list(self.truncated)
        return out


@dataclass(frozen=True, slots=True)
class Finding:
    """Instruction-like content at ``path``. ``rule`` is a stable id (see :data:`RULES`);
    ``excerpt`` is bounded (:data:`EXCERPT_CHARS`), has every invisible and control character
    removed and whitespace collapsed — safe to show an operator, but it is still the upstream's
    words, so it is never put on the wire toward a model."""

    path: str
    rule: str
    excerpt: str

    def describe(self) -> str:
        """One line for operators: rule, path and the sanitized excerpt (never for the wire toward a model)."""
        return f"{self.rule} at {self.path}: {self.excerpt!r}"


@dataclass(frozen=True, slots=True)
class Projection:
    """The result of projecting one definition. ``definition`` is deep-frozen; ``changed`` says
    whether it differs from the input; ``mentions`` maps identifier-like tokens of its projected
    text to the path where each first appears (for :func:`cross_references`). ``omitted``
    counts changes and findings beyond the per-definition bounds."""

    definition: Mapping[str, Any]
    changes: tuple[Change, ...]
    findings: tuple[Finding, ...]
    mentions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    omitted: int = 0

    @property
    def changed(self) -> bool:
        """Whether the projected definition differs from the upstream's (any text removed or truncated)."""
        return bool(self.changes)


# -- paths --------------------------------------------------------------------------------------

# A path is built as a linked pair (parent, key) — one small tuple per step — and flattened only
# when a change, finding or mention needs it rendered.
Path = tuple[Any, ...]
_ROOT: Path = ()
_SIMPLE_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$\-]*")


def _parts(path: Path) -> list[str | int]:
    out: list[str | int] = []
    while path:
        path, key = path
        out.append(key)
    out.reverse()
    return out


def format_path(path: Sequence[str | int]) -> str:
    """``("inputSchema", "properties", "a.b", "description")`` → ``inputSchema.properties["a.b"].description``.
    Keys that are not simple identifiers are quoted with JSON escapes (so a key with invisible
    characters is visible in the path); the result is bounded to 300 characters."""
    out: list[str] = []
    for part in path:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _SIMPLE_KEY.fullmatch(part):
            out.append(f".{part}" if out else part)
        else:
            shown = part if len(part) <= 64 else part[:63] + "…"
            out.append("[" + json.dumps(shown, ensure_ascii=True) + "]")
    text = "".join(out)
    return text if len(text) <= 300 else text[:299] + "…"


def _render(path: Path) -> str:
    return format_path(_parts(path))


# -- the walk -----------------------------------------------------------------------------------

_SCHEMA_TEXT = frozenset({"title", "description", "$comment"})
_SCHEMA_ONE = frozenset(
    {
        "items",
        "additionalItems",
        "additionalProperties",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contains",
        "propertyNames",
        "not",
        "if",
        "then",
        "else",
        "contentSchema",
    }
)
_SCHEMA_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
_SCHEMA_MAP = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"})
_SCHEMA_DATA = frozenset({"enum", "const", "default", "examples"})
# Structural keywords: their values are neither text nor data worth scanning.
_SCHEMA_STRUCTURE = frozenset(
    {
        "type",
        "format",
        "pattern",
        "required",
        "$ref",
        "$dynamicRef",
        "$recursiveRef",
        "$id",
        "id",
        "$schema",
        "$anchor",
        "$dynamicAnchor",
        "$recursiveAnchor",
        "$vocabulary",
        "dependentRequired",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "minContains",
        "maxContains",
        "uniqueItems",
        "contentEncoding",
        "contentMediaType",
        "readOnly",
        "writeOnly",
        "deprecated",
        "nullable",
    }
)
_MAPS = (dict, MappingProxyType)
_LISTS = (list, tuple)
_TEXT, _MAP, _LIST, _ONE, _DATA, _SKIP = range(6)
_SCHEMA_ACTION: dict[str, int] = {
    **{k: _SKIP for k in _SCHEMA_STRUCTURE},
    **{k: _DATA for k in _SCHEMA_DATA},
    **{k: _ONE for k in _SCHEMA_ONE},
    **{k: _LIST for k in _SCHEMA_LIST - {"items"}},
    **{k: _MAP for k in _SCHEMA_MAP},
    **{k: _TEXT for k in _SCHEMA_TEXT},
}


class _Walker:
    """One projection: collects changes, findings and mentions while rebuilding only the
    containers whose text changed (an unchanged definition comes back as the same object).
    Hot in the reconcile cycle: concrete ``isinstance`` checks, one dict dispatch per key,
    paths as linked pairs."""

    __slots__ = ("budgets", "changes", "findings", "mentions", "omitted")

    def __init__(self, budgets: Budgets) -> None:
        self.budgets = budgets
        self.changes: list[Change] = []
        self.findings: list[Finding] = []
        self.mentions: dict[str, Path] = {}  # token -> path of its first occurrence
        self.omitted = 0

    def merge(self, part: _Part) -> None:
        """Fold a memoized part's results into this walk, within the bounds."""
        room = MAX_CHANGES - len(self.changes)
        self.changes.extend(part.changes[:room])
        self.omitted += max(0, len(part.changes) - room) + part.omitted
        room = MAX_FINDINGS - len(self.findings)
        self.findings.extend(part.findings[:room])
        self.omitted += max(0, len(part.findings) - room)
        for token, path in part.mentions:
            if token not in self.mentions and len(self.mentions) < MAX_MENTIONS:
                self.mentions[token] = path

    def finding(self, path: Path, rule: str, excerpt: str) -> None:
        if len(self.findings) >= MAX_FINDINGS:
            self.omitted += 1
            return
        self.findings.append(Finding(_render(path), rule, excerpt))

    def text(self, value: str, path: Path, budget: int) -> str:
        r = project_text(value, budget)
        if r.removed or r.truncated is not None:
            if len(self.changes) >= MAX_CHANGES:
                self.omitted += 1
            else:
                self.changes.append(Change(_render(path), r.removed, r.truncated))
        for rule, excerpt in r.findings:
            self.finding(path, rule, excerpt)
        if r.mentions:
            mentions = self.mentions
            for m in r.mentions:
                if m not in mentions and len(mentions) < MAX_MENTIONS:
                    mentions[m] = path
        return r.text

    def data(self, value: Any, path: Path, depth: int = 0) -> None:
        """Scan data (kept verbatim) for findings."""
        if isinstance(value, str):
            if value:
                for rule, excerpt in scan_data_text(value):
                    self.finding(path, rule, excerpt)
        elif depth >= MAX_DEPTH:
            return
        elif isinstance(value, _MAPS):
            for k, v in value.items():
                sub = (path, k)
                self.name(k, sub)
                self.data(v, sub, depth + 1)
        elif isinstance(value, _LISTS):
            for i, v in enumerate(value):
                self.data(v, (path, i), depth + 1)

    def name(self, key: str, path: Path) -> None:
        """A key or name is contract: never altered, scanned (``path`` ends with the key)."""
        if len(key) > 3 or not key.isascii():
            for rule, excerpt in scan_data_text(key):
                self.finding(path, rule, excerpt)

    def schema(self, node: Any, path: Path, depth: int = 0) -> Any:
        if not isinstance(node, _MAPS):
            return node
        if depth >= MAX_DEPTH:
            self.finding(path, "too_deep", f"nesting deeper than {MAX_DEPTH}")
            return node
        out: dict[str, Any] | None = None
        action = _SCHEMA_ACTION.get
        for key, value in node.items():
            what = action(key)
            if what == _SKIP:
                continue
            new = value
            if what == _TEXT:
                if isinstance(value, str):
                    new = self.text(value, (path, key), self.budgets.schema)
            elif what == _MAP:
                if isinstance(value, _MAPS):
                    new = self.schema_map(value, (path, key), depth, key == "properties")
            elif what == _ONE:
                if key == "items" and isinstance(value, _LISTS):  # draft-07 tuple form
                    new = self.schema_list(value, (path, key), depth)
                else:
                    new = self.schema(value, (path, key), depth + 1)
            elif what == _LIST:
                if isinstance(value, _LISTS):
                    new = self.schema_list(value, (path, key), depth)
            elif what == _DATA:
                self.data(value, (path, key))
                continue
            else:  # an unknown keyword: kept, scanned
                sub = (path, key)
                self.name(key, sub)
                self.data(value, sub)
                continue
            if new is not value:
                if out is None:
                    out = dict(node)
                out[key] = new
        return node if out is None else out

    def schema_map(self, value: Mapping[str, Any], path: Path, depth: int, names: bool) -> Any:
        out: dict[str, Any] | None = None
        for name, sub in value.items():
            sub_path = (path, name)
            if names:
                self.name(name, sub_path)
            if not isinstance(sub, _MAPS):
                continue  # draft-07 "dependencies" lists, boolean schemas
            new = self.schema(sub, sub_path, depth + 1)
            if new is not sub:
                if out is None:
                    out = dict(value)
                out[name] = new
        return value if out is None else out

    def schema_list(self, value: Sequence[Any], path: Path, depth: int) -> Any:
        out: list[Any] | None = None
        for i, sub in enumerate(value):
            new = self.schema(sub, (path, i), depth + 1)
            if new is not sub:
                if out is None:
                    out = list(value)
                out[i] = new
        return value if out is None else out

    def arguments(self, value: Any, path: Path) -> Any:
        if not isinstance(value, _LISTS):
            self.data(value, path)
            return value
        out: list[Any] | None = None
        for i, arg in enumerate(value):
            arg_path = (path, i)
            if not isinstance(arg, _MAPS):
                self.data(arg, arg_path)
                continue
            new_arg: dict[str, Any] | None = None
            for key, text in arg.items():
                sub = (arg_path, key)
                if key in ("title", "description") and isinstance(text, str):
                    new = self.text(text, sub, self.budgets.schema)
                    if new is not text:
                        if new_arg is None:
                            new_arg = dict(arg)
                        new_arg[key] = new
                elif key != "required":
                    self.data(text, sub)
            if new_arg is not None:
                if out is None:
                    out = list(value)
                out[i] = new_arg
        return value if out is None else out


_DISPLAY_NAME_KINDS = frozenset({"resource", "resource_template"})
_SCHEMA_FIELDS = frozenset({"inputSchema", "outputSchema"})
# Identifiers, URLs and numbers: neither projected nor scanned.
_PASS_THROUGH = frozenset({"_meta", "icons", "uri", "uriTemplate", "mimeType", "size", "execution"})


_TOP_TEXT = frozenset({"title", "description", "name"})


@dataclass(frozen=True, slots=True)
class _Part:
    """The memoized projection of a definition's structural part (schemas, arguments,
    annotations, other fields): only the keys that changed, and what was found."""

    changed: Mapping[str, Any]
    changes: tuple[Change, ...]
    findings: tuple[Finding, ...]
    mentions: tuple[tuple[str, Path], ...]
    omitted: int
    clean: bool = False  # nothing changed, nothing found
    tokens: frozenset[str] = frozenset()


_PART_KEY_MAX = 16 * 1024


class _Memos:
    """Memo tables bound to one :class:`Budgets` object (by identity, held strongly so its id
    is never reused): top-level texts keyed by the text alone, parts by (kind, marshal bytes).
    Hashing a frozen dataclass is Python code; this runs for every admitted definition."""

    __slots__ = ("budgets", "description", "part", "title", "tool_part")

    def __init__(self, budgets: Budgets) -> None:
        self.budgets = budgets
        self.title: OrderedDict[str, frozenset[str]] = OrderedDict()
        self.description: OrderedDict[str, frozenset[str]] = OrderedDict()
        self.part: OrderedDict[tuple[str, bytes], _Part] = OrderedDict()
        self.tool_part: OrderedDict[bytes, _Part] = OrderedDict()


_MEMOS: dict[int, _Memos] = {}


def _memos(budgets: Budgets) -> _Memos:
    found = _MEMOS.get(id(budgets))
    if found is None or found.budgets is not budgets:
        if len(_MEMOS) >= 64:
            _MEMOS.clear()
        found = _MEMOS[id(budgets)] = _Memos(budgets)
    return found


_DIRTY: frozenset[str] = frozenset({"\0dirty"})  # "this text needs the full walk" (never a token)
_TOKEN_SETS: OrderedDict[frozenset[str], frozenset[str]] = OrderedDict()


def _shared(tokens: frozenset[str]) -> frozenset[str]:
    """One object per distinct mentions set (memo values stay few objects for the GC)."""
    if not tokens:
        return _NO_TOKENS
    found = _TOKEN_SETS.get(tokens)
    if found is None:
        found = tokens
        memo_put(_TOKEN_SETS, tokens, found)
    return found


def _top_text(memo: OrderedDict[str, frozenset[str]], text: str, budget: int) -> frozenset[str]:
    """A top-level text's mentions when it needs no change and raises no finding, else
    :data:`_DIRTY`. Memoized by the text alone, as a shared frozenset: thousands of distinct
    clean titles cost the collector nothing but the memo's own table."""
    found = memo.get(text)
    if found is None:
        r = compute_text(text, budget)
        found = _shared(r.mention_set) if r.clean else _DIRTY
        if len(text) <= MEMO_TEXT_MAX:
            memo_put(memo, text, found, MEMO_LONG_MAX if len(text) > 256 else MEMO_MAX)
    return found


def _project_part(kind: str, part: Mapping[str, Any], budgets: Budgets) -> _Part:
    w = _Walker(budgets)
    changed: dict[str, Any] = {}
    for key, value in part.items():
        new = value
        path = (_ROOT, key)
        if key in _SCHEMA_FIELDS:
            new = w.schema(value, path)
        elif key == "annotations" and isinstance(value, _MAPS):
            for k, v in value.items():
                if k == "title" and isinstance(v, str):
                    projected = w.text(v, (path, k), budgets.title)
                    if projected is not v:
                        new = {**value, "title": projected}
                elif k != "title" and not isinstance(v, bool | int | float):
                    w.name(k, (path, k))
                    w.data(v, (path, k))
        elif key == "arguments":
            new = w.arguments(value, path)
        else:
            w.data(value, path)
        if new is not value:
            changed[key] = new
    return _Part(
        MappingProxyType(changed),
        tuple(w.changes),
        tuple(w.findings),
        tuple(w.mentions.items()),
        w.omitted,
        clean=not (changed or w.changes or w.findings or w.omitted),
        tokens=_shared(frozenset(w.mentions)),
    )


def _walk(kind: str, definition: Mapping[str, Any], budgets: Budgets) -> tuple[Mapping[str, Any], _Walker]:
    """Top-level texts are projected on every call (each text is memoized on its own); the rest
    — schemas above all, which rarely change when a description does — is memoized by its
    marshal bytes, a fast exact serialization (equal bytes, equal value), so a relist whose
    only change is a description does not walk the schemas again."""
    w = _Walker(budgets)
    out: dict[str, Any] | None = None
    part: dict[str, Any] | None = None
    for key, value in definition.items():
        if key in _PASS_THROUGH:
            continue
        if key not in _TOP_TEXT:
            if part is None:
                part = {}
            part[key] = value
            continue
        new = value
        if isinstance(value, str):
            if key == "description":
                new = w.text(value, (_ROOT, key), budgets.description)
            elif key == "title" or kind in _DISPLAY_NAME_KINDS:
                new = w.text(value, (_ROOT, key), budgets.title)
            # a tool's or prompt's name is its identifier: validated by listing, never altered
        if new is not value:
            if out is None:
                out = dict(definition)
            out[key] = new
    if part is not None:
        done = _part_of(kind, part, budgets)
        if done.changed:
            if out is None:
                out = dict(definition)
            out.update(done.changed)
        w.merge(done)
    return (definition if out is None else out), w


def _part_of(kind: str, part: dict[str, Any], budgets: Budgets, memos: _Memos | None = None) -> _Part:
    memo = (memos or _memos(budgets)).part
    try:
        memo_key: tuple[str, bytes] | None = (kind, marshal.dumps(part))
    except ValueError:  # not plain JSON-like data (e.g. a frozen mapping): walk it
        memo_key = None
    done = memo.get(memo_key) if memo_key is not None else None
    if done is None:
        done = _project_part(kind, part, budgets)
        if memo_key is not None and len(memo_key[1]) <= _PART_KEY_MAX:
            memo_put(memo, memo_key, done, MEMO_LONG_MAX)
    return done


def project_definition(
    kind: str, definition: Mapping[str, Any], budgets: Budgets = DEFAULT_BUDGETS
) -> tuple[Mapping[str, Any], tuple[Change, ...], tuple[Finding, ...], frozenset[str], int]:
    """The engine's entry point: :func:`project` without freezing, without rendering mention
    paths and without the cross-source check. Returns (definition — the input object itself
    when nothing changed, otherwise a new plain structure sharing the unchanged parts; changes;
    findings; mentioned tokens; omitted). The caller must treat the definition as read-only.

    It runs in the reconcile cycle for every new definition of an untrusted source, so the
    common case — nothing to change, nothing found — takes a path without bookkeeping."""
    memos = _MEMOS.get(id(budgets))
    if memos is None or memos.budgets is not budgets:
        memos = _memos(budgets)
    if kind == "tool" and definition.keys() <= _TOOL_KEYS:
        fast = _tool_fast(definition, budgets, memos)
        if fast is not None:
            return definition, (), (), fast, 0
    part: dict[str, Any] | None = None
    tokens: frozenset[str] = _NO_TOKENS
    for key, value in definition.items():
        if key in _TOP_TEXT:
            if value.__class__ is not str or (key == "name" and kind not in _DISPLAY_NAME_KINDS):
                continue
            if key == "description":
                found = _top_text(memos.description, value, budgets.description)
            else:
                found = _top_text(memos.title, value, budgets.title)
            if found is _DIRTY:
                break  # something to report: take the full walk
            if found:
                tokens = found if not tokens else _union(tokens, found)
        elif key not in _PASS_THROUGH:
            if part is None:
                part = {}
            part[key] = value
    else:
        done = _part_of(kind, part, budgets, memos) if part is not None else None
        if done is None or done.clean:
            if done is not None and done.tokens:
                tokens = done.tokens if not tokens else _union(tokens, done.tokens)
            return definition, (), (), tokens, 0
    projected, w = _walk(kind, definition, budgets)
    return projected, tuple(w.changes), tuple(w.findings), frozenset(w.mentions), w.omitted


_NO_TOKENS: frozenset[str] = frozenset()
_TOOL_KEYS = frozenset(
    {"name", "title", "description", "inputSchema", "outputSchema", "annotations", "icons", "execution", "_meta"}
)


def _tool_fast(definition: Mapping[str, Any], budgets: Budgets, memos: _Memos) -> frozenset[str] | None:
    """The mentions of a tool definition that needs nothing changed and has nothing to report,
    or ``None`` (then the caller takes the general path). The tool's known keys are read
    directly and its structural part is keyed by the marshal bytes of a 3-tuple: this is the
    reconcile cycle's per-definition cost for an untrusted source."""
    get = definition.get
    tokens = _NO_TOKENS
    for key, memo, budget in (
        ("description", memos.description, budgets.description),
        ("title", memos.title, budgets.title),
    ):
        text = get(key)
        if text is None:
            continue
        if text.__class__ is not str:
            return None
        found = memo.get(text)
        if found is None:
            found = _top_text(memo, text, budget)
        if found is _DIRTY:
            return None
        if found:
            tokens = found if not tokens else _union(tokens, found)
    parts = (get("inputSchema"), get("outputSchema"), get("annotations"))
    if parts == (None, None, None):
        return tokens
    try:
        part_key = marshal.dumps(parts)
    except ValueError:
        return None
    done = memos.tool_part.get(part_key)
    if done is None:
        names = ("inputSchema", "outputSchema", "annotations")
        done = _project_part("tool", {n: v for n, v in zip(names, parts, strict=True) if v is not None}, budgets)
        if len(part_key) <= _PART_KEY_MAX:
            memo_put(memos.tool_part, part_key, done, MEMO_LONG_MAX)
    if not done.clean:
        return None
    if done.tokens:
        tokens = done.tokens if not tokens else _union(tokens, done.tokens)
    return tokens


_UNIONS: OrderedDict[tuple[frozenset[str], frozenset[str]], frozenset[str]] = OrderedDict()


def _union(a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
    """``a | b``, shared: the operands are memoized objects (their hashes are cached), so equal
    definitions end up with one mentions object, and interning their provenance stays cheap."""
    key = (a, b)
    found = _UNIONS.get(key)
    if found is None:
        found = a | b
        memo_put(_UNIONS, key, found)
    return found


def mention_paths(kind: str, definition: Mapping[str, Any], budgets: Budgets = DEFAULT_BUDGETS) -> dict[str, str]:
    """Token → path of its first occurrence in the projected text of ``definition`` (the rare
    path: called once a cross-source reference is found)."""
    _projected, w = _walk(kind, definition, budgets)
    return {token: _render(path) for token, path in w.mentions.items()}


def cross_references(
    mentions: Mapping[str, str], other_names: Mapping[str, str] | frozenset[str] | set[str]
) -> tuple[Finding, ...]:
    """``cross_source_reference`` findings for the ``mentions`` (token → path) that name
    something another source exposes. ``other_names`` is a set of names, or a mapping name →
    owning source (named in the excerpt)."""
    out = []
    for token in sorted(mentions):
        if token in other_names:
            owner = other_names[token] if isinstance(other_names, Mapping) else None
            excerpt = f"mentions {token!r}" + (f", exposed by source {owner!r}" if owner else "")
            out.append(Finding(mentions[token], "cross_source_reference", excerpt))
    return tuple(out)


def project(
    kind: str,
    definition: Mapping[str, Any],
    *,
    budgets: Budgets = DEFAULT_BUDGETS,
    other_names: Mapping[str, str] | frozenset[str] | set[str] = frozenset(),
) -> Projection:
    """Project one definition of ``kind`` (``tool``, ``prompt``, ``resource``,
    ``resource_template``) for an untrusted source (I20).

    Guarantees: only the text fields listed in the module docstring change; everything else —
    schema structure, types, ``required``, ``enum``/``const``/``default``/``examples`` values,
    formats, patterns, every key — is returned byte for byte, so the projected schemas accept
    exactly the instances the original ones accept. Projecting the result again changes
    nothing. ``other_names`` (names other sources expose) adds ``cross_source_reference``
    findings for identifier-like mentions of them."""
    projected, w = _walk(kind, definition, budgets)
    mentions = {token: _render(path) for token, path in w.mentions.items()}
    findings = tuple(w.findings)
    if other_names:
        findings += cross_references(mentions, other_names)
    return Projection(freeze(projected), tuple(w.changes), findings, MappingProxyType(mentions), w.omitted)
