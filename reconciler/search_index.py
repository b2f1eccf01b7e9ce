"""A lexical search index over one generation's tools (issue 31, ADR 0029).

Built once per (generation, view) — lazily, on the first search that needs it — and shared by
every session that searches that generation: a session holds no index of its own. It lives on
the generation (:class:`SearchIndexes`, a field of ``Generation``) and is freed with it when
the generation is retired, so a pinned run searches its pinned revision's index.

What is indexed is what the gateway *serves* (I20): the exposed name, split into words at
``snake_case``, ``camelCase``, ``kebab-case``, dots and ``__``; the served title and description
(the projection for untrusted sources); the names and descriptions of the input schema's
top-level properties. Fields are weighted by repeating their tokens (name x3, title x2, the rest
x1). Ranking is Okapi BM25 (k1 = 1.2, b = 0.75) with a small suffix stemmer and a stop-word list;
no model, no download.

Memory is bounded and flat: per term one ``array('I')`` of postings, each ``doc << 8 | tf``
(term frequency capped at 255); per document its length; the entries themselves are the
catalog's (not copied). Text longer than :data:`TEXT_CHARS_MAX` per document is cut (the
catalog already bounds definitions; this bounds the index whatever the bounds say).

Search takes ``admit(name)``: the caller's authority check. Candidates are ranked first and
admitted in rank order, so a name the caller may not use is never returned and never counted
toward ``limit`` (the invariant I21 in docs/DESIGN.md)."""

from __future__ import annotations

import functools
import gc
import heapq
import json
import math
import re
import sys
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from mcp_reconciler.reconciler.model import CatalogEntry

K1 = 1.2
B = 0.75
#: Token repetitions per field: a word in the name says more than one in a long description.
NAME_WEIGHT, TITLE_WEIGHT, TEXT_WEIGHT = 3, 2, 1
#: Characters of text indexed per document (name, title, description and parameters together).
TEXT_CHARS_MAX = 4096
#: Results one search may return.
LIMIT_MAX = 50
#: A query longer than this is cut (bounded work per request).
QUERY_CHARS_MAX = 512
_TF_MAX = 255
_score = itemgetter(1)

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[A-Za-z0-9]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "please",
        "that",
        "the",
        "this",
        "to",
        "use",
        "using",
        "want",
        "was",
        "what",
        "when",
        "which",
        "will",
        "with",
        "would",
        "you",
        "your",
    ]
)


def _stem(word: str) -> str:
    """A deliberately tiny suffix stemmer: enough that "files"/"file", "sending"/"send" and
    "created"/"create" meet, never so much that distinct words collapse."""
    if len(word) > 5 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 4 and word.endswith("ied"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith("ed"):
        return word[:-1] if word.endswith("ated") or word.endswith("ued") else word[:-2]
    if len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def tokens(text: str) -> list[str]:
    """The index terms of ``text``: words split at case changes and any non-alphanumeric
    character (so ``get_userProfile__v2`` is ``get user profile v2``), lower-cased, stemmed,
    stop words dropped."""
    out: list[str] = []
    for word in _WORD.findall(text):
        out.extend(_terms(word))
    return out


@functools.lru_cache(maxsize=65_536)
def _terms(word: str) -> tuple[str, ...]:
    """The terms of one alphanumeric word (cached: catalogs repeat their words, and a build
    then splits and stems each distinct word once)."""
    out: list[str] = []
    for part in _CAMEL.split(word):
        low = part.lower()
        if low and low not in _STOP:
            out.append(_stem(low))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: the served name, its title and one-line description (as served), and
    its BM25 score."""

    name: str
    title: str | None
    description: str
    score: float


def one_line(text: str, limit: int = 200) -> str:
    """The first line (or sentence) of ``text``, at most ``limit`` characters."""
    line = text.strip().split("\n", 1)[0].strip()
    if len(line) > limit:
        line = line[: limit - 1].rstrip() + "…"
    return line


def _document(name: str, data: Mapping[str, Any]) -> tuple[Counter[str], int]:
    """The weighted term frequencies of one served tool definition, and its length."""
    title = data.get("title")
    if not isinstance(title, str):
        annotations = data.get("annotations")
        title = annotations.get("title") if isinstance(annotations, Mapping) else None
    description = data.get("description")
    parts: list[str] = []
    schema = data.get("inputSchema")
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    if isinstance(props, Mapping):
        for pname, pschema in props.items():
            parts.append(str(pname))
            if isinstance(pschema, Mapping) and isinstance(pschema.get("description"), str):
                parts.append(pschema["description"])
    budget = TEXT_CHARS_MAX
    name_t = tokens(name[:budget])
    budget -= len(name)
    title_t = tokens(title[: max(0, budget)]) if isinstance(title, str) else []
    budget -= len(title) if isinstance(title, str) else 0
    text = (description if isinstance(description, str) else "") + "\n" + "\n".join(parts)
    text_t = tokens(text[: max(0, budget)])
    counts = Counter(text_t)  # TEXT_WEIGHT is 1
    for t in name_t:
        counts[t] += NAME_WEIGHT
    for t in title_t:
        counts[t] += TITLE_WEIGHT
    return counts, len(name_t) * NAME_WEIGHT + len(title_t) * TITLE_WEIGHT + len(text_t) * TEXT_WEIGHT


class SearchIndex:
    """BM25 over one routing table's tools (module docstring). Immutable after :meth:`build`."""

    __slots__ = ("_avgdl", "_doc_len", "_entries", "_idf", "_names", "_norm", "_postings", "build_s", "size_bytes")

    def __init__(
        self,
        names: tuple[str, ...],
        entries: tuple[CatalogEntry, ...],
        postings: dict[str, array[int]],
        doc_len: array[int],
        build_s: float,
    ) -> None:
        self._names = names
        self._entries = entries
        self._postings = postings
        self._doc_len = doc_len
        n = len(names)
        self._avgdl = (sum(doc_len) / n) if n else 0.0
        # idf (times k1 + 1) per term and BM25's length normalizer per document, precomputed: a
        # query is then a few dict lookups and one short pass per posting.
        self._idf = {t: (K1 + 1) * math.log(1.0 + (n - len(p) + 0.5) / (len(p) + 0.5)) for t, p in postings.items()}
        avgdl = self._avgdl or 1.0
        self._norm = array("d", (K1 * (1 - B + B * dl / avgdl) for dl in doc_len))
        self.build_s = build_s
        self.size_bytes = self._measure()

    @classmethod
    def build(cls, tools: Mapping[str, CatalogEntry]) -> SearchIndex:
        """Index every tool of ``tools`` (exposed name -> entry)."""
        started = time.perf_counter()
        # The build allocates ~10 short-lived objects per tool; with the collector on, each
        # threshold crossing walks the whole young heap (and now and then all of it, the
        # catalog included). Nothing it allocates forms a cycle, so collect after, not during.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return cls._build(tools, started)
        finally:
            if collecting:
                gc.enable()

    @classmethod
    def _build(cls, tools: Mapping[str, CatalogEntry], started: float) -> SearchIndex:
        names = tuple(tools)
        entries = tuple(tools.values())
        postings: dict[str, array[int]] = {}
        doc_len = array("I")
        for doc, (name, entry) in enumerate(zip(names, entries, strict=True)):
            try:
                data = json.loads(entry.raw)
            except ValueError:
                data = {}
            counts, length = _document(name, data if isinstance(data, dict) else {})
            doc_len.append(length)
            key = doc << 8
            for w, tf in counts.items():
                plist = postings.get(w)
                if plist is None:
                    plist = postings[w] = array("I")
                plist.append(key | (tf if tf < _TF_MAX else _TF_MAX))
        return cls(names, entries, postings, doc_len, time.perf_counter() - started)

    def _measure(self) -> int:
        """Bytes the index itself holds (postings, lengths, the idf table, the name tuple;
        the entries belong to the catalog)."""
        size = sys.getsizeof(self._postings) + sys.getsizeof(self._idf) + sys.getsizeof(self._names)
        size += sys.getsizeof(self._doc_len) + sys.getsizeof(self._norm)
        for term, plist in self._postings.items():
            size += sys.getsizeof(term) + sys.getsizeof(plist) + 24  # the idf float
        return size

    @property
    def documents(self) -> int:
        """Tools indexed."""
        return len(self._names)

    @property
    def terms(self) -> int:
        """Distinct terms."""
        return len(self._postings)

    def scores(self, query: str) -> dict[int, float]:
        """BM25 score per document matching any term of ``query`` (cut to
        :data:`QUERY_CHARS_MAX`)."""
        acc: dict[int, float] = {}
        get = acc.get
        norm = self._norm
        for term in dict.fromkeys(tokens(query[:QUERY_CHARS_MAX])):
            plist = self._postings.get(term)
            if plist is None:
                continue
            idf = self._idf[term]
            for p in plist:
                doc = p >> 8
                tf = p & 0xFF
                acc[doc] = get(doc, 0.0) + idf * tf / (tf + norm[doc])
        return acc

    def search(self, query: str, limit: int, admit: Callable[[str], bool] = lambda name: True) -> list[Hit]:
        """The ``limit`` best tools for ``query`` that ``admit`` lets through, best first (ties
        by name). ``limit`` is clamped to 1..:data:`LIMIT_MAX`."""
        limit = max(1, min(int(limit), LIMIT_MAX))
        acc = self.scores(query)
        if not acc:
            return []
        names = self._names
        # Most callers may use most names: admit from the best few first (selected by score
        # alone: no tuple per candidate), and rank everything only when the admission check
        # turned too many of them away.
        window = limit * 4
        if len(acc) > window:
            top = heapq.nlargest(window, acc.items(), key=_score)
            out = self._admitted(sorted((-s, names[d], d) for d, s in top), limit, admit)
            if len(out) == limit:
                return out
        return self._admitted(sorted((-s, names[d], d) for d, s in acc.items()), limit, admit)

    def _admitted(
        self, ranked: Iterable[tuple[float, str, int]], limit: int, admit: Callable[[str], bool]
    ) -> list[Hit]:
        out: list[Hit] = []
        for neg, name, doc in ranked:
            if admit(name):
                out.append(self._hit(doc, -neg))
                if len(out) == limit:
                    break
        return out

    def _hit(self, doc: int, score: float) -> Hit:
        try:
            data = json.loads(self._entries[doc].raw)
        except ValueError:
            data = {}
        title = data.get("title") if isinstance(data.get("title"), str) else None
        description = data.get("description") if isinstance(data.get("description"), str) else ""
        return Hit(name=self._names[doc], title=title, description=one_line(description), score=round(score, 4))


@dataclass(frozen=True, slots=True)
class IndexReport:
    """Status of one built index: the view it covers (``None``: the whole catalog), its size and
    how long it took to build."""

    view: str | None
    documents: int
    terms: int
    bytes: int
    build_ms: float


class SearchIndexes:
    """The indexes of one generation, one per view searched (``None``: the whole catalog), each
    built once on first use. Thread-safe building (the lock is held only while building);
    reads of a built index take no lock. Bounded by the generation's views + 1."""

    __slots__ = ("_built", "_lock")

    def __init__(self) -> None:
        self._built: dict[str | None, SearchIndex] = {}
        self._lock = threading.Lock()

    def get(self, view: str | None, tools: Callable[[], Mapping[str, CatalogEntry]]) -> SearchIndex:
        """The index of ``view``, building it from ``tools()`` the first time."""
        index = self._built.get(view)
        if index is not None:
            return index
        with self._lock:
            index = self._built.get(view)
            if index is None:
                index = self._built[view] = SearchIndex.build(tools())
            return index

    def reports(self) -> tuple[IndexReport, ...]:
        """What is built, for status."""
        return tuple(
            IndexReport(
                view=view,
                documents=ix.documents,
                terms=ix.terms,
                bytes=ix.size_bytes,
                build_ms=round(ix.build_s * 1000, 3),
            )
            for view, ix in list(self._built.items())
        )
