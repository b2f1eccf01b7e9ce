"""Parsing one big upstream message in slices, so no slice holds the event loop long (ADR 0025).

``pydantic_core.from_json`` holds the GIL for the whole message: a 10 MB list page of small
objects is one uninterrupted stretch of the loop (82 ms for 100,000 tools), and a thread would
not help (the GIL). :func:`parse_sliced` walks the message's envelope (the top-level object and
``result``) itself: every array directly under ``result`` (``result.tools``,
``result.content``, ...) is parsed :data:`CHUNK_CHARS` at a time by ``from_json``, cut at
element boundaries found while scanning, and the loop gets a checkpoint whenever a slice has
run :data:`SLICE_S`. Every other value is parsed whole by the standard library's C scanner
(``json``'s ``scan_once``; a single 30 MB string cannot be sliced, and is one C call about as
fast as ``from_json``).

Guarantees: the result equals ``from_json(data)`` for every input (a value that may hold a
lone surrogate escape, which ``json`` would accept and ``from_json`` refuses, is handed to
``from_json``); no slice between two checkpoints parses more than :data:`SLICE_S` of
work plus one chunk; ``entries`` (if given) stops the parse within one chunk of element
``entries + 1`` of a list field (``result.tools`` etc.) with :class:`EntriesPassed`, so
nothing further is parsed. Malformed input raises ``ValueError``."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import anyio.lowlevel
import pydantic_core

#: Loop time one slice may use before it yields (the bound is 50 ms for any other work waiting).
SLICE_S = 0.005

#: Characters of an array parsed per ``from_json`` call (about 2 ms of parsing for small objects).
CHUNK_CHARS = 64 * 1024

_WS = re.compile(r"[ \t\n\r]*")
#: Where an array of objects may continue with its next element.
_BOUNDARY = re.compile(r"\}[ \t\n\r]*,[ \t\n\r]*")
#: How an object element starts: its brace and first key.
_KEY_START = re.compile(r'\{[ \t\n\r]*"(?:[^"\\]|\\.)*"[ \t\n\r]*:')
#: A ``\\u`` escape of a surrogate that may be lone (``from_json`` refuses lone surrogates,
#: ``json``'s scanner would not).
_MAYBE_LONE_SURROGATE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


#: ``json``'s C scanner: one value at an index, returned with the index after it.
_scan_once: Any = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__


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


class EntriesPassed(Exception):
    """A list field of ``result`` passed ``limit`` entries; parsing stopped once ``count`` of
    them (more than ``limit``, at most one chunk more) were parsed."""

    def __init__(self, field: str, limit: int, count: int) -> None:
        super().__init__(f"result.{field} has more than {limit} entries")
        self.field = field
        self.limit = limit
        self.count = count


class _Walk:
    def __init__(self, text: str, list_fields: frozenset[str], entries: int | None) -> None:
        self.text = text
        self.list_fields = list_fields
        self.entries = entries
        self.slices = Slices()

    def ws(self, i: int) -> int:
        m = _WS.match(self.text, i)
        assert m is not None  # ``*`` always matches
        return m.end()

    def value(self, i: int) -> tuple[Any, int]:
        """One value at ``i`` and the index after it, by ``json``'s C scanner; a value that may
        hold a lone surrogate escape (``json`` accepts one, ``from_json`` refuses it) is handed
        to ``from_json``, which decides."""
        try:
            value, end = _scan_once(self.text, i)
        except StopIteration as exc:
            raise ValueError(f"expected a JSON value at {exc.value}") from None
        if self.text.find("\\u", i, end) >= 0 and _MAYBE_LONE_SURROGATE.search(self.text, i, end):
            value = pydantic_core.from_json(self.text[i:end])
        return value, end

    def expect(self, i: int, char: str) -> int:
        if not self.text.startswith(char, i):
            raise ValueError(f"expected {char!r} at {i}")
        return i + 1

    async def obj(self, i: int, depth: int) -> tuple[dict[str, Any], int]:
        """An object at ``i`` (``text[i] == "{"``); depth 0 is the envelope, 1 is ``result``."""
        out: dict[str, Any] = {}
        i = self.ws(i + 1)
        if self.text.startswith("}", i):
            return out, i + 1
        while True:
            if not self.text.startswith('"', i):
                raise ValueError(f"expected a key at {i}")
            key, i = self.value(i)
            i = self.ws(self.expect(self.ws(i), ":"))
            if depth == 0 and key == "result" and self.text.startswith("{", i):
                out[key], i = await self.obj(i, 1)
            elif depth == 1 and self.text.startswith("[", i):
                out[key], i = await self.array(i, key)
            else:
                out[key], i = self.value(i)
            i = self.ws(i)
            if self.text.startswith("}", i):
                return out, i + 1
            i = self.ws(self.expect(i, ","))

    async def array(self, i: int, key: str) -> tuple[list[Any], int]:
        """An array at ``i`` (``text[i] == "["``), parsed :data:`CHUNK_CHARS` at a time: a
        chunk ends at a candidate boundary (``}`` then ``,``) and is parsed by ``from_json`` as
        ``[chunk]``; that parse succeeds only if the cut really is between two elements (a cut
        inside a string or a nested value leaves it unbalanced). When it is not, the next
        elements are parsed one by one up to the chunk's end, which finds a real boundary."""
        limit = self.entries if key in self.list_fields else None
        text = self.text
        out: list[Any] = []
        i = self.ws(i + 1)
        if text.startswith("]", i):
            return out, i + 1
        # Elements of one list are written alike: the next element starts the way the first
        # does (``{"name":``), which a nested ``},`` (``"anyOf":[{...},{...}]``) rarely does.
        first = _KEY_START.match(text, i)
        boundary = re.compile(_BOUNDARY.pattern + (f"(?={re.escape(first.group())})" if first else ""))
        while True:
            cut = boundary.search(text, i + CHUNK_CHARS)
            items: list[Any] | None = None
            if cut is not None:
                try:
                    items = pydantic_core.from_json("[" + text[i : cut.start() + 1] + "]")
                except ValueError:
                    items = None
            if items is not None and cut is not None:
                out += items
                i = cut.end()
            else:
                i = self.one_by_one(i, out, i + CHUNK_CHARS)
            if limit is not None and len(out) > limit:
                raise EntriesPassed(key, limit, len(out))
            await self.slices.tick()
            i = self.ws(i)
            if text.startswith("]", i):
                return out, i + 1
            if items is None:
                i = self.ws(self.expect(i, ","))

    def one_by_one(self, i: int, out: list[Any], until: int) -> int:
        """Elements from ``i`` appended to ``out`` until one ends at ``until`` or later, or the
        array does; returns the index after the last one (at its ``,`` or ``]``)."""
        while True:
            item, i = self.value(i)
            out.append(item)
            j = self.ws(i)
            if i >= until or not self.text.startswith(",", j):
                return i
            i = self.ws(j + 1)


async def parse_sliced(data: bytes, *, list_fields: frozenset[str] = frozenset(), entries: int | None = None) -> Any:
    """``data`` (one JSON-RPC message) parsed with checkpoints between slices (module docstring).
    ``entries`` bounds the arrays named in ``list_fields`` directly under ``result``."""
    text = data.decode("utf-8")  # UnicodeDecodeError is a ValueError, as from_json's errors are
    walk = _Walk(text, list_fields, entries)
    i = walk.ws(0)
    if text.startswith("{", i):
        value, i = await walk.obj(i, 0)
    else:
        value, i = walk.value(i)
    if walk.ws(i) != len(text):
        raise ValueError(f"trailing characters at {walk.ws(i)}")
    return value


__all__ = ["SLICE_S", "EntriesPassed", "Slices", "parse_sliced"]
