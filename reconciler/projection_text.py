"""Text-level policy for untrusted metadata (I20): which characters are invisible, which
content is instruction-like, and what one text field becomes — the part of the projection that
knows nothing about definitions or schemas (``projection.py`` walks those).

* :func:`clean_text` removes invisible and control characters, counted per category: the tag
  block, zero-width characters, bidi embeddings/overrides/isolates and marks, C0/C1 controls
  except newline and tab, and a few other invisible format characters. One ZWNJ/ZWJ between two
  non-ASCII letters (or inside an emoji sequence) and one variation selector after its base are
  spelling and are kept; anywhere else, or in runs, they are removed.
* :data:`RULES` are the findings; :func:`project_text` applies removal, the budget and the
  rules to one text, :func:`scan_data_text` only scans a value that is contract data. Detection
  runs on the text with *every* invisible character removed and on its NFKC form; each rule's
  regex runs only when one of its keywords is in the lowercased text (the common text has none).
* :func:`memo_put` feeds the bounded first-in first-out memo tables these pure functions use.

Pure: no I/O, no clock; the memo tables are bounded: at most 512 entries with keys up to
4,096 characters (descriptions, scanned data) or 16 KiB (schema parts), 2,048 for short keys —
about 10 MB in the worst case, far less with real catalogs."""

from __future__ import annotations

import re
import unicodedata
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = [
    "EXCERPT_CHARS",
    "MAX_MENTIONS",
    "MEMO_LONG_MAX",
    "MEMO_MAX",
    "MEMO_TEXT_MAX",
    "RULES",
    "TRUNCATION_MARK",
    "TextResult",
    "bounded_put",
    "clean_text",
    "compute_text",
    "identifier_like",
    "memo_put",
    "project_text",
    "sanitize_excerpt",
    "scan_data_text",
]

TRUNCATION_MARK = "… [truncated by gateway]"
EXCERPT_CHARS = 120  # a finding's excerpt, after sanitizing
MAX_MENTIONS = 64  # identifier-like tokens kept per definition for cross-source checks


# -- characters ---------------------------------------------------------------------------------

# Removed wherever they appear, by category (the counts name them).
_CATEGORIES: tuple[tuple[str, str], ...] = (
    ("tag", "\U000e0000-\U000e007f"),
    ("zero_width", "\u200b\u2060\ufeff"),
    ("bidi", "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"),
    ("control", "\x00-\x08\x0b-\x1f\x7f-\x9f"),
    (
        "invisible",
        # soft hyphen, combining grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian
        # vowel separator, invisible math operators, deprecated format characters, interlinear
        # annotation controls, musical-symbol format controls, lone surrogates
        "\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180e\u2061-\u2064\u206a-\u206f\u3164\uffa0"
        "\ufff9-\ufffb\U0001d173-\U0001d17a\ud800-\udfff",
    ),
)
_CATEGORY_RES = tuple((name, re.compile(f"[{chars}]")) for name, chars in _CATEGORIES)
_ALWAYS = re.compile("[" + "".join(chars for _, chars in _CATEGORIES) + "]")
_ASCII_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
_JOINERS = "\u200c\u200d"
_JOINER_RUN = re.compile(f"[{_JOINERS}]+")
_VS = "\ufe00-\ufe0f\U000e0100-\U000e01ef"
_VS_RE = re.compile(f"[{_VS}]")
_VS_EXTRA = re.compile(f"(?:^|(?<=[{_VS}]))[{_VS}]+")  # a selector with no base, or after another
_ALL_INVISIBLE = re.compile(f"[{_JOINERS}{_VS}]")
_TAG_TEXT = re.compile("[\U000e0020-\U000e007e]+")
_WS = re.compile(r"\s+")


def _letter(ch: str) -> bool:
    return not ch.isascii() and unicodedata.category(ch)[0] in "LM" and not _VS_RE.match(ch)


def _emoji(ch: str) -> bool:
    return unicodedata.category(ch) in ("So", "Sk") or ch == "\ufe0f"


def _keep_joiner(text: str, start: int, end: int) -> bool:
    """A single ZWNJ/ZWJ between two non-ASCII letters (Persian, Indic …) or, for ZWJ, inside an
    emoji sequence, is spelling; anything else is a hiding place."""
    if end - start != 1 or start == 0 or end >= len(text):
        return False
    before, after = text[start - 1], text[end]
    if _letter(before) and _letter(after):
        return True
    return text[start] == "\u200d" and _emoji(before) and unicodedata.category(after) == "So"


@dataclass(frozen=True, slots=True)
class _Cleaned:
    text: str
    removed: Mapping[str, int]
    hidden: str  # printable ASCII smuggled in tag characters, decoded (bounded)


_NOTHING_REMOVED: Mapping[str, int] = MappingProxyType({})


def _clean(text: str) -> _Cleaned:
    if text.isascii():
        if _ASCII_CONTROL.search(text) is None:
            return _Cleaned(text, _NOTHING_REMOVED, "")
        cleaned = _ASCII_CONTROL.sub("", text)
        return _Cleaned(cleaned, MappingProxyType({"control": len(text) - len(cleaned)}), "")
    removed: dict[str, int] = {}
    hidden = ""
    if _ALWAYS.search(text) is not None:
        if max(text) >= "\U000e0000":
            hidden = "".join(chr(ord(c) - 0xE0000) for c in "".join(_TAG_TEXT.findall(text))[:4096])
        for name, rx in _CATEGORY_RES:
            text, n = rx.subn("", text)
            if n:
                removed[name] = n
    if "\u200c" in text or "\u200d" in text:
        dropped = 0
        src = text

        def joiner(m: re.Match[str]) -> str:
            nonlocal dropped
            if _keep_joiner(src, m.start(), m.end()):
                return m.group()
            dropped += m.end() - m.start()
            return ""

        text = _JOINER_RUN.sub(joiner, src)
        if dropped:
            removed["zero_width"] = removed.get("zero_width", 0) + dropped
    if _VS_RE.search(text) is not None:
        before = len(text)
        text = _VS_EXTRA.sub("", text)
        if len(text) != before:
            removed["variation_selector"] = before - len(text)
    return _Cleaned(text, MappingProxyType(removed) if removed else _NOTHING_REMOVED, hidden)


def clean_text(text: str) -> tuple[str, Mapping[str, int]]:
    """``text`` without invisible and control characters, and the removal count per category.
    Idempotent: ``clean_text(clean_text(t)[0])`` removes nothing."""
    c = _clean(text)
    return c.text, c.removed


def _detection_text(text: str) -> str:
    """What findings are matched against: every invisible character gone (joiners and selectors
    included), so ``ig\u200bnore`` reads ``ignore``."""
    if text.isascii():
        return text
    return _ALL_INVISIBLE.sub("", _ALWAYS.sub("", text))


# -- findings -----------------------------------------------------------------------------------

_I = re.IGNORECASE
RULES: Mapping[str, str] = MappingProxyType(
    {
        "hidden_block": "a hidden instruction block (<IMPORTANT>, <SYSTEM>, an HTML comment, chat-template tokens)",
        "override_instructions": "asks to ignore, override or disregard previous instructions",
        "conceal_from_user": "asks to keep something from the user",
        "sensitive_reference": (
            "refers to credentials or secret files (~/.ssh, id_rsa, .env, API keys, passwords, tokens)"
        ),
        "smuggled_text": "text hidden in invisible tag characters",
        "invisible_in_data": "invisible characters in contract data (enum/const/default/examples, names), kept as is",
        "cross_source_reference": "refers to a tool or prompt another source exposes",
        "too_deep": "schema nesting deeper than the projection walks; deeper text was not projected",
    }
)

_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        "hidden_block",
        r"<\s*/?\s*(?:important|system|sys|instructions?|secret|hidden|admin|critical|override|prompt)\b[^<>]{0,64}>"
        r"|<!--|<\|\s*(?:im_start|im_end|system|endoftext|start_header_id|end_header_id|eot_id)\s*\|>"
        r"|\[/?INST\]|<<\s*/?SYS\s*>>",
    ),
    (
        "override_instructions",
        r"\b(?:ignore|disregard|forget|override|bypass|overrule)\b\s+(?:(?:all|any|the|your|of|these|those)\s+)*"
        r"(?:previous|prior|above|earlier|preceding|other|existing|original|system|safety|developer|user'?s?)\s+"
        r"(?:\w+\s+)?(?:instructions?|prompts?|rules|guidelines|directives|messages?|context|constraints|polic(?:y|ies))\b"
        r"|\b(?:supersedes?|takes?\s+precedence\s+over|overrides?)\s+(?:all\s+|any\s+)?"
        r"(?:other|previous|prior|system|existing)\s+(?:\w+\s+)?(?:instructions?|prompts?|rules|tools?)\b",
    ),
    (
        "conceal_from_user",
        r"\b(?:do\s+not|don'?t|never|must\s+not|should\s+not|without)\s+(?:\w+\s+){0,2}?"
        r"(?:tell|telling|inform|informing|mention|mentioning|reveal|revealing|notify|notifying|alert|alerting|"
        r"show|showing|disclose|disclosing|let|letting|ask|asking)\b(?:\s+\w+){0,3}?\s+(?:the\s+)?users?\b"
        r"|\b(?:hide|conceal|keep)\b[^.\n]{0,40}\bfrom\s+(?:the\s+)?users?\b"
        r"|\bthe\s+users?\s+(?:must|should|will|need|needs)\s+(?:not|never)\s+(?:to\s+)?(?:know|see|notice|be\s+told)\b"
        r"|\b(?:do\s+not|don'?t|never)\s+(?:mention|reveal|disclose)\s+(?:this|these|that|it)\b",
    ),
    (
        "sensitive_reference",
        r"~/\.ssh\b|\.ssh/|(?<![a-z0-9])id_(?:rsa|dsa|ecdsa|ed25519)(?![a-z0-9])|authorized_keys"
        r"|\.aws/credentials|(?<![a-z0-9])\.(?:netrc|npmrc|pypirc|git-credentials|pgpass)(?![a-z0-9])"
        r"|\.kube/config|\.docker/config\.json|/etc/(?:passwd|shadow)\b|(?<![a-z0-9_.-])\.env(?:\.[a-z]+)?(?![a-z0-9])"
        r"|(?<![a-z0-9])(?:mcp\.json|claude_desktop_config\.json)|\.cursor/"
        r"|(?<![a-z])(?:api|secret|private|access)[\s_-]?keys?(?![a-z])"
        r"|(?<![a-z])(?:passwords?|passwd|passphrases?|credentials?)(?![a-z])"
        r"|(?<![a-z])(?:access|auth|bearer|api|refresh|session|secret|github|oauth)[\s_-]?tokens?(?![a-z])",
    ),
)
_RULE_RES = tuple((rule, re.compile(pattern, _I)) for rule, pattern in _PATTERNS)
_TOKEN = re.compile(r"[A-Za-z_][\w.\-]*\w")
_MENTION = re.compile(r"[A-Za-z_][A-Za-z0-9]*(?:(?:__|[_.\-])[A-Za-z0-9]+)+|[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+")


def _excerpt(text: str, start: int, end: int) -> str:
    lo = max(0, start - 40)
    hi = min(len(text), max(end, start + 1) + 40)
    core = _WS.sub(" ", text[lo:hi]).strip()
    if len(core) > EXCERPT_CHARS:
        core = core[: EXCERPT_CHARS - 1] + "…"
    return ("…" if lo > 0 else "") + core + ("…" if hi < len(text) else "")


def sanitize_excerpt(text: str) -> str:
    """Operator-safe rendering of upstream text: invisible/control characters removed,
    whitespace collapsed, bounded to :data:`EXCERPT_CHARS`."""
    cleaned = _detection_text(_clean(text).text)
    return _excerpt(cleaned, 0, 0) if len(cleaned) > EXCERPT_CHARS else _WS.sub(" ", cleaned).strip()


# Cheap prefilters: a rule's regex runs only when one of its keywords is in the lowercased text.
_KEYWORDS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "hidden_block": ("<", "[inst", "[/inst"),
        "override_instructions": (
            "ignor", "disregard", "forget", "overrid", "bypass", "overrul", "supersed", "precedence",
        ),
        "conceal_from_user": ("user", "mention", "reveal", "disclos"),
        "sensitive_reference": (
            "ssh", "id_", "authorized_keys", ".aws", ".netrc", ".npmrc", ".pypirc", "git-credentials", ".pgpass",
            ".kube", ".docker", "/etc/", ".env", "mcp.json", "claude_desktop", ".cursor", "key", "passw",
            "passphrase", "credential", "token",
        ),
    }
)  # fmt: skip


def _scan(text: str) -> tuple[tuple[str, str], ...]:
    """(rule, excerpt) for each rule that matches ``text`` (already cleaned), on the detection
    text and on its NFKC form."""
    det = _detection_text(text)
    variants = [det]
    if not det.isascii():
        nf = unicodedata.normalize("NFKC", det)
        if nf != det:
            variants.append(nf)
    out: dict[str, str] = {}
    for variant in variants:
        low = variant.lower()
        for rule, rx in _RULE_RES:
            if rule in out or not any(k in low for k in _KEYWORDS[rule]):
                continue
            m = rx.search(variant)
            if m is not None:
                out[rule] = _excerpt(variant, m.start(), m.end())
    return tuple(out.items())


_PUNCT = ".,;:!?()[]{}'\"`<>*"


def _mentions(text: str) -> tuple[str, ...]:
    """Identifier-like tokens of ``text``, in order, deduplicated, bounded. Words are split on
    whitespace first: only those with ``_``, ``-``, ``.`` or an inner capital are looked at."""
    found: dict[str, None] = {}
    for word in text.split():
        if "_" in word or "-" in word or "." in word or not (word.islower() or word.isupper() or word.istitle()):
            for token in _TOKEN.findall(word.strip(_PUNCT)):
                if _MENTION.fullmatch(token) is not None:
                    found[token] = None
                    if len(found) >= MAX_MENTIONS:
                        return tuple(found)
    return tuple(found)


def identifier_like(name: str) -> bool:
    """Names specific enough to count as a reference when they appear in another source's text:
    ``send_email``, ``mail__send``, ``sendEmail`` — not plain words like ``search``."""
    return _MENTION.fullmatch(name) is not None


# -- text fields --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextResult:
    """One projected text field: the cleaned and possibly truncated ``text``, removed characters by
    category, (before, after) lengths if truncated, ``(rule, excerpt)`` findings and the
    identifier-like mentions (bounded). ``clean`` means nothing was removed, truncated or found."""

    text: str
    removed: Mapping[str, int]
    truncated: tuple[int, int] | None
    findings: tuple[tuple[str, str], ...]
    mentions: tuple[str, ...]
    clean: bool = False  # nothing removed, nothing truncated, nothing found
    mention_set: frozenset[str] = frozenset()


# Bounded memo tables of pure functions, evicted first-in first-out. OrderedDict, not dict:
# popping a plain dict's first key again and again leaves dummies that ``next(iter(d))`` must
# skip, which makes every eviction slower than the last.
_TEXT_MEMO: OrderedDict[tuple[str, int], TextResult] = OrderedDict()
_DATA_MEMO: OrderedDict[str, tuple[tuple[str, str], ...]] = OrderedDict()
# Memo bounds: entries per table, and the longest key memoized. Worst case a few MB in all;
# typically far less (keys are the upstream's own strings).
MEMO_MAX = 2048
MEMO_TEXT_MAX = 4096  # longer texts are not memoized (bounded memory)
MEMO_LONG_MAX = 512  # tables whose keys may be long (descriptions, schemas)


def bounded_put(memo: OrderedDict[Any, Any], key: Any, value: Any, limit: int) -> None:
    """Insert into a first-in first-out memo table of at most ``limit`` entries."""
    memo_put(memo, key, value, limit)


def memo_put(memo: OrderedDict[Any, Any], key: Any, value: Any, limit: int = MEMO_MAX) -> None:
    """Insert into a first-in first-out memo table, evicting the oldest entry at ``limit`` entries."""
    if len(memo) >= limit:
        memo.popitem(last=False)
    memo[key] = value


def project_text(text: str, budget: int) -> TextResult:
    """:func:`compute_text`, memoized for texts up to ``MEMO_TEXT_MAX`` code points (bounded table)."""
    key = (text, budget)
    hit = _TEXT_MEMO.get(key)
    if hit is not None:
        return hit
    result = compute_text(text, budget)
    if len(text) <= MEMO_TEXT_MAX:
        memo_put(_TEXT_MEMO, key, result, MEMO_LONG_MAX)
    return result


def compute_text(text: str, budget: int) -> TextResult:
    """Project one text field within ``budget`` code points: remove invisible and control characters,
    truncate with a mark, scan for instruction-like content (including hidden smuggled text).
    Pure; the result's text is at most ``budget`` code points."""
    c = _clean(text)
    out = c.text
    truncated = None
    if len(out) > budget:
        keep = budget - len(TRUNCATION_MARK)
        cut = out[:keep] if keep > 0 else out[:budget]
        # A joiner is kept only between two letters: never leave one dangling at the cut.
        cut = cut.rstrip(_JOINERS)
        out = cut + TRUNCATION_MARK if keep > 0 else cut
        truncated = (len(c.text), len(out))
    findings = list(_scan(out))
    if c.hidden.strip():
        hidden = _WS.sub(" ", c.hidden).strip()
        findings.append(("smuggled_text", _excerpt(hidden, 0, len(hidden))))
    mentions = _mentions(out)
    result = TextResult(
        out,
        c.removed,
        truncated,
        tuple(findings),
        mentions,
        not (c.removed or truncated or findings),
        frozenset(mentions),
    )
    return result


def scan_data_text(text: str) -> tuple[tuple[str, str], ...]:
    """Findings for a string that is data (kept verbatim): rules, plus invisible characters."""
    hit = _DATA_MEMO.get(text)
    if hit is not None:
        return hit
    c = _clean(text)
    findings = list(_scan(c.text))
    if c.hidden.strip():
        hidden = _WS.sub(" ", c.hidden).strip()
        findings.append(("smuggled_text", _excerpt(hidden, 0, len(hidden))))
    if c.removed or (not text.isascii() and _ALL_INVISIBLE.search(c.text)):
        findings.append(("invisible_in_data", sanitize_excerpt(text)))
    result = tuple(findings)
    if len(text) <= MEMO_TEXT_MAX:
        memo_put(_DATA_MEMO, text, result, MEMO_LONG_MAX)
    return result
