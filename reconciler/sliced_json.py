"""Parsing one big upstream message in slices, so no slice holds the event loop long (ADR 0025,
ADR 0040).

``pydantic_core.from_json`` holds the GIL for the whole message: a 10 MB list page of small
objects is one uninterrupted stretch of the loop (82 ms for 100,000 tools), and a thread would
not help (the GIL). :func:`parse_message` parses a message up to :data:`SLICED_BYTES` whole with
``from_json``, and anything longer with :func:`parse_sliced`, which walks the message itself and
never hands a C parser more than a bounded piece of it:

- an array is parsed :data:`CHUNK_CHARS` at a time by ``from_json``, cut at element boundaries
  found within a bounded window (``}`` then ``,``; a cut that is not a boundary makes that
  parse fail, and the elements are then taken one by one);
- an object or array whose first :data:`CHUNK_CHARS` do not hold all of it is walked member by
  member; anything shorter is parsed by the standard library's C scanner (``json``'s
  ``scan_once``) in one call;
- a string longer than :data:`CHUNK_CHARS` (a 30 MB text or base64 blob: the usual big tool
  result) is decoded :data:`STRING_CHARS` at a time, cut between escape sequences (never inside
  one, never between the halves of a surrogate pair), each piece by ``from_json``, and the
  pieces joined once;
- the bytes are decoded to text a slice at a time, cut between UTF-8 sequences;

and the loop gets a checkpoint whenever a slice has run :data:`SLICE_S`.

Guarantees: the result equals ``from_json(data)`` for every input (a value that may hold a
lone surrogate escape, which ``json`` would accept and ``from_json`` refuses, is handed to
``from_json``; nesting past ``from_json``'s depth limit is refused as it refuses it); no slice
between two checkpoints does more than :data:`SLICE_S` of work plus one bounded piece, except
the two joins (the decoded text's pieces, a long string's pieces): each is one copy of the whole
(a 30 MB string of non-Latin-1 text is 120 MB to copy: 60 ms on the 2-core CI machine);
``entries`` (if given) stops the parse within one chunk of element ``entries + 1`` of a list
field (``result.tools`` etc.) with :class:`EntriesPassed`, so nothing further is parsed.
Malformed input raises ``ValueError``."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import anyio.lowlevel
import pydantic_core

#: Loop time one slice may use before it yields (the bound is 50 ms for any other work waiting).
SLICE_S = 0.005

#: Characters of an array parsed per ``from_json`` call (about 2 ms of parsing for small
#: objects), and the longest value handed whole to ``json``'s scanner.
CHUNK_CHARS = 64 * 1024

#: Characters of one long string decoded per ``from_json`` call (well under a millisecond of
#: ASCII, a few of escaped or non-ASCII text).
STRING_CHARS = 256 * 1024

#: Bytes decoded from UTF-8 per call.
DECODE_BYTES = 1024 * 1024

#: A message longer than this is parsed in slices by :func:`parse_message`; a shorter one is one
#: ``from_json`` call (at most a few milliseconds).
SLICED_BYTES = 256 * 1024

#: Windows a nested value is first tried in, whole, by ``json``'s scanner.
_PROBES = (1024, CHUNK_CHARS)

#: ``from_json``'s nesting limit (a deeper document is a ``ValueError`` there, and here).
MAX_DEPTH = 201

_WS = re.compile(r"[ \t\n\r]*")
#: Where an array of objects may continue with its next element.
_BOUNDARY = re.compile(r"(?<=\})[ \t\n\r]*,[ \t\n\r]*")
#: Where an array of anything else may continue.
_ANY_BOUNDARY = re.compile(r"[ \t\n\r]*,[ \t\n\r]*")
#: How an object element starts: its brace and first key.
_KEY_START = re.compile(r'\{[ \t\n\r]*"(?:[^"\\]|\\.)*"[ \t\n\r]*:')
#: A ``\\u`` escape of a surrogate that may be lone (``from_json`` refuses lone surrogates,
#: ``json``'s scanner would not).
_MAYBE_LONE_SURROGATE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
#: A surrogate code point in decoded text: only a lone surrogate escape leaves one.
_SURROGATE = re.compile("[\ud800-\udfff]")
#: The two halves of a surrogate pair's escapes (a long string is never cut between them).
_HIGH_SURROGATE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}")
_LOW_SURROGATE = re.compile(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}")


#: ``json``'s C scanner: one value at an index, returned with the index after it.
_scan_once: Any = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__
#: ``json``'s C string scanner: the string after an opening quote, and the index after its close.
_scanstring: Any = json.decoder.scanstring  # type: ignore[attr-defined]  # the C one when built


class Slices:
    """A budget of loop time: :meth:`tick` yields to the loop once :data:`SLICE_S` has passed
    since the last yield. For work done in many small steps on the loop (call it every few
    steps; a call costs a clock read)."""

    __slots__ = ("_started",)

    def __init__(self) -> None:
        self._started = time.perf_counter()

    async def tick(self) -> None:
        """Yield to the loop if this slice has used its time."""
        if time.perf_counter() - self._started >= SLICE_S:
            await anyio.lowlevel.checkpoint()
            self._started = time.perf_counter()


def _escape_length(text: str, k: int) -> int:
    """The length of the escape starting at ``text[k]`` (a backslash)."""
    return 6 if text.startswith("u", k + 1) else 2


class EntriesPassed(Exception):
    """A list field of ``result`` passed ``limit`` entries; parsing stopped once ``count`` of
    them (more than ``limit``, at most one chunk more) were parsed."""

    def __init__(self, field: str, limit: int, count: int) -> None:
        super().__init__(f"result.{field} has more than {limit} entries")
        self.field = field
        self.limit = limit
        self.count = count


class _Walk:
    def __init__(self, text: str, list_fields: frozenset[str], entries: int | None, slices: Slices) -> None:
        self.text = text
        self.list_fields = list_fields
        self.entries = entries
        self.slices = slices

    def ws(self, i: int) -> int:
        m = _WS.match(self.text, i)
        assert m is not None  # ``*`` always matches
        return m.end()

    def scanned(self, text: str, i: int) -> tuple[Any, int]:
        """One value at ``text[i]`` by ``json``'s C scanner; a value that may hold a lone
        surrogate escape (``json`` accepts one, ``from_json`` refuses it) is handed to
        ``from_json``, which decides."""
        try:
            value, end = _scan_once(text, i)
        except StopIteration as exc:
            raise ValueError(f"expected a JSON value at {exc.value}") from None
        if text.find("\\u", i, end) >= 0 and _MAYBE_LONE_SURROGATE.search(text, i, end):
            value = pydantic_core.from_json(text[i:end])
        return value, end

    async def value(self, i: int, depth: int, key: str | None = None) -> tuple[Any, int]:
        """One value at ``i`` and the index after it (module docstring: what is parsed whole,
        what in slices). ``depth`` is the value's nesting; depth 1 is ``result``, whose arrays
        named in ``list_fields`` are held to ``entries``."""
        text = self.text
        if text.startswith('"', i):
            return await self.string(i)
        if not text.startswith(("{", "["), i):
            return self.scanned(text, i)  # a number or a literal (an over-long integer is refused by it)
        if depth >= MAX_DEPTH:
            raise ValueError(f"recursion limit exceeded at {i}")
        if depth > 0:
            # Most values are short: try a small window first, then a chunk (a window is a copy).
            for size in _PROBES:
                window = text[i : i + size]
                try:
                    value, end = self.scanned(window, 0)
                    return value, i + end
                except ValueError:
                    if len(window) < size:  # all the rest of the message, and still not a value
                        return self.scanned(text, i)  # malformed: the scanner says where
        if text.startswith("{", i):
            return await self.obj(i, depth)
        return await self.array(i, depth, key)

    async def string(self, i: int) -> tuple[str, int]:
        """The string at ``i``, :data:`STRING_CHARS` at a time, each piece cut before an escape
        (never inside one, never between the halves of a surrogate pair): a piece without
        escapes is found by ``str.find`` and checked by ``from_json``; one with escapes is
        decoded by ``json``'s C string scanner, which also finds the closing quote (a lone
        surrogate escape, which it accepts and ``from_json`` refuses, is refused)."""
        text = self.text
        q = text.find('"', i + 1, i + 1 + CHUNK_CHARS)
        if q >= 0 and text.find("\\", i + 1, q) < 0:
            return self.scanned(text, i)  # short and plain (keys, names): one scanner call
        pieces: list[str] = []
        start = i + 1
        while True:
            cut = min(start + STRING_CHARS, len(text))
            if cut < len(text):
                cut = self.escape_boundary(start, cut)
            q = text.find('"', start, cut)
            if text.find("\\", start, q if q >= 0 else cut) < 0:  # plain up to the quote or the cut
                end, closed = (q, True) if q >= 0 else (cut, False)
                pieces.append(pydantic_core.from_json('"' + text[start:end] + '"'))
            else:
                try:
                    piece, after = _scanstring(text[start:cut] + '"', 0)
                except ValueError:
                    raise ValueError(f"invalid string starting at {i}") from None
                end = start + after - 1
                closed = end < cut
                if not piece.isascii() and _SURROGATE.search(piece):  # a lone one (a pair decodes to one character)
                    raise ValueError(f"lone surrogate in the string starting at {i}")
                pieces.append(piece)
            if closed:
                return (pieces[0] if len(pieces) == 1 else "".join(pieces)), end + 1
            if cut >= len(text):
                raise ValueError(f"unterminated string starting at {i}")
            start = cut
            await self.slices.tick()

    def run_start(self, k: int, floor: int) -> int:
        """Where the run of backslashes ending at ``k`` starts (``k + 1`` when ``text[k]`` is
        not one), looking back no further than ``floor`` (a token boundary)."""
        text = self.text
        low = k + 1
        while low > floor:
            seg = text[max(floor, low - 256) : low]
            kept = len(seg.rstrip("\\"))
            if kept:
                return low - len(seg) + kept
            low -= len(seg)
        return floor

    def escape_boundary(self, start: int, cut: int) -> int:
        """``cut`` moved back to a token boundary: before an escape the cut would split, and
        before a high surrogate escape whose low half would start the next piece; never back to
        ``start`` (a token boundary): then after the escape (or pair) that starts there."""
        text = self.text
        k = text.rfind("\\", max(start, cut - 12), cut)
        if k < 0:
            return cut  # no escape (6 characters at most) reaches the cut
        k -= (k - self.run_start(k, start)) % 2  # the second backslash of ``\\\\``: its escape starts before
        if k + _escape_length(text, k) <= cut:  # the last escape ends before the cut
            split_pair = k + 6 == cut and _HIGH_SURROGATE.match(text, k) and _LOW_SURROGATE.match(text, cut)
            if not split_pair:
                return cut
        elif (
            k - 6 >= start
            and _LOW_SURROGATE.match(text, k)
            and _HIGH_SURROGATE.match(text, k - 6)
            and (k - 6 - self.run_start(k - 6, start)) % 2 == 0
        ):
            k -= 6  # the cut splits a pair's low half: cut before its high half
        if k > start:
            return k
        first = _escape_length(text, start)  # the piece is one escape (or one pair) long
        if _HIGH_SURROGATE.match(text, start) and _LOW_SURROGATE.match(text, start + 6):
            first = 12
        return start + first

    def expect(self, i: int, char: str) -> int:
        if not self.text.startswith(char, i):
            raise ValueError(f"expected {char!r} at {i}")
        return i + 1

    async def obj(self, i: int, depth: int) -> tuple[dict[str, Any], int]:
        """An object at ``i`` (``text[i] == "{"``), member by member."""
        out: dict[str, Any] = {}
        i = self.ws(i + 1)
        if self.text.startswith("}", i):
            return out, i + 1
        while True:
            if not self.text.startswith('"', i):
                raise ValueError(f"expected a key at {i}")
            key, i = await self.string(i)
            i = self.ws(self.expect(self.ws(i), ":"))
            # ``result`` is walked whatever its size: its list fields carry the entry bound.
            if depth == 0 and key == "result" and self.text.startswith("{", i):
                out[key], i = await self.obj(i, 1)
            else:
                out[key], i = await self.value(i, depth + 1, key if depth == 1 else None)
            await self.slices.tick()
            i = self.ws(i)
            if self.text.startswith("}", i):
                return out, i + 1
            i = self.ws(self.expect(i, ","))

    async def array(self, i: int, depth: int, key: str | None) -> tuple[list[Any], int]:
        """An array at ``i`` (``text[i] == "["``), parsed :data:`CHUNK_CHARS` at a time: a
        chunk ends at a candidate boundary (``}`` then ``,``; for an array of anything but objects,
        a ``,``) found within the next chunk, and is
        parsed by ``from_json`` as ``[chunk]``; that parse succeeds only if the cut really is
        between two elements (a cut inside a string or a nested value leaves it unbalanced).
        When it is not, or no candidate is near, the next elements are taken one by one (each
        by :meth:`value`) up to the chunk's end. ``key``: the field's name when the array is
        directly under ``result`` (``tools``: held to ``entries``)."""
        limit = self.entries if key is not None and key in self.list_fields else None
        text = self.text
        out: list[Any] = []
        i = self.ws(i + 1)
        if text.startswith("]", i):
            return out, i + 1
        # Elements of one list are written alike: the next element starts the way the first
        # does (``{"name":``), which a nested ``},`` (``"anyOf":[{...},{...}]``) rarely does.
        first = _KEY_START.match(text, i, i + CHUNK_CHARS)
        if first is not None:
            boundary = re.compile(_BOUNDARY.pattern + f"(?={re.escape(first.group())})")
        else:  # strings, numbers, literals: a comma, checked by the parse as any cut is
            boundary = _ANY_BOUNDARY
        while True:
            cut = boundary.search(text, i + CHUNK_CHARS, i + 2 * CHUNK_CHARS)
            items: list[Any] | None = None
            if cut is not None:
                try:
                    items = pydantic_core.from_json("[" + text[i : cut.start()] + "]")
                except ValueError:
                    items = None
            if items is not None and cut is not None:
                out += items
                i = cut.end()
            else:
                i = await self.one_by_one(i, depth, out, i + CHUNK_CHARS)
            if limit is not None and len(out) > limit:
                raise EntriesPassed(key or "", limit, len(out))
            await self.slices.tick()
            i = self.ws(i)
            if text.startswith("]", i):
                return out, i + 1
            if items is None:
                i = self.ws(self.expect(i, ","))

    async def one_by_one(self, i: int, depth: int, out: list[Any], until: int) -> int:
        """Elements from ``i`` appended to ``out`` until one ends at ``until`` or later, or the
        array does; returns the index after the last one (at its ``,`` or ``]``)."""
        while True:
            item, i = await self.value(i, depth + 1)
            out.append(item)
            j = self.ws(i)
            if i >= until or not self.text.startswith(",", j):
                return i
            i = self.ws(j + 1)


async def decode_sliced(data: bytes, slices: Slices | None = None) -> str:
    """``data.decode("utf-8")``, :data:`DECODE_BYTES` at a time (cut before a UTF-8
    continuation byte), with the loop's turns between slices."""
    if len(data) <= DECODE_BYTES:
        return data.decode("utf-8")
    slices = slices or Slices()
    pieces: list[str] = []
    start = 0
    while start < len(data):
        end = min(start + DECODE_BYTES, len(data))
        while end < len(data) and end > start and data[end] & 0xC0 == 0x80:
            end -= 1  # never cut a character's bytes apart
        if end == start:  # no character starts in this slice: not UTF-8 (let the codec say so)
            end = min(start + DECODE_BYTES, len(data))
        pieces.append(data[start:end].decode("utf-8"))
        start = end
        await slices.tick()
    return "".join(pieces)


async def parse_sliced(data: bytes, *, list_fields: frozenset[str] = frozenset(), entries: int | None = None) -> Any:
    """``data`` (one JSON-RPC message) parsed with checkpoints between slices (module docstring).
    ``entries`` bounds the arrays named in ``list_fields`` directly under ``result``."""
    slices = Slices()
    text = await decode_sliced(data, slices)  # UnicodeDecodeError is a ValueError, as from_json's errors are
    walk = _Walk(text, list_fields, entries, slices)
    i = walk.ws(0)
    value, i = await walk.value(i, 0)
    if walk.ws(i) != len(text):
        raise ValueError(f"trailing characters at {walk.ws(i)}")
    return value


async def parse_message(data: bytes) -> Any:
    """One upstream message: whole by ``from_json`` up to :data:`SLICED_BYTES`, else
    :func:`parse_sliced` — one function for every size, the loop's turns only where they are
    needed. Malformed input raises ``ValueError``."""
    if len(data) <= SLICED_BYTES:
        return pydantic_core.from_json(data)
    return await parse_sliced(data)


__all__ = ["SLICED_BYTES", "SLICE_S", "EntriesPassed", "Slices", "decode_sliced", "parse_message", "parse_sliced"]
