"""Canonical digests and deep freezing of JSON-like data.

Digests are sha256 over canonical JSON (sorted keys, no whitespace), so two definitions that
mean the same thing hash the same whatever key order an upstream sent."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from json import encoder as _json_encoder
from json.encoder import encode_basestring
from types import MappingProxyType
from typing import Any


def _default(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple | frozenset | set):
        return list(value)
    raise TypeError(f"not JSON-serializable: {type(value).__name__}")


# ``json.dumps`` with these options builds a JSONEncoder and a C encoder on every call; the C
# encoder it would build is made once here (same options, so the same bytes: a test pins that).
# ``markers=None`` skips the circular-reference check: JSON-like data cannot be circular.
_c_make_encoder: Any = getattr(_json_encoder, "c_make_encoder", None)
_ENCODE: Any = (
    _c_make_encoder(None, _default, encode_basestring, None, ":", ",", True, False, True)
    if _c_make_encoder is not None
    else None
)


def canonical_json(value: object) -> bytes:
    """Deterministic JSON bytes for ``value`` (mappings proxies and tuples included): sorted
    keys, no whitespace, UTF-8 — exactly ``json.dumps(value, sort_keys=True, separators=(",",
    ":"), ensure_ascii=False)``, without building an encoder per call (the reconcile cycle
    calls this for every new definition)."""
    if _ENCODE is None or isinstance(value, str):  # a bare string: the C encoder wants a container
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default).encode()
    return "".join(_ENCODE(value, 0)).encode()


def digest_bytes(data: bytes) -> str:
    """Lowercase hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def digest_json(value: object) -> str:
    """Lowercase hex sha256 of :func:`canonical_json` of ``value``: equal for equal JSON data, whatever
    the key order or mapping/tuple types. TypeError for values that are not JSON-like."""
    return digest_bytes(canonical_json(value))


def digest_parts(parts: Iterable[str]) -> str:
    """Digest of an ordered sequence of digests/strings (used to combine per-source digests)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def freeze(value: Any) -> Any:
    """Deep-freeze JSON-like data: dicts become read-only mappings, lists become tuples.

    Immutability (I1) must hold for the data a generation carries, not just its attributes."""
    if isinstance(value, MappingProxyType):
        return value
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Inverse of :func:`freeze`: plain dicts and lists, for serialization to the wire."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(v) for v in value]
    return value
