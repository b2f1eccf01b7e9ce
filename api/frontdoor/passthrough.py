"""What a ``tools/call`` passes through as the upstream's JSON (ADR 0019, ADR 0038): the check
that decides it (:func:`simple_call_result`) and the result that carries it (:class:`RawResult`).
Kept apart from ``forwarding`` so that module is about the operation, this one about what a
result may skip."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RawResult:
    """An upstream ``tools/call`` result kept as the upstream's JSON (the fast lane): only ever
    one that :func:`simple_call_result` accepts, so nothing in it needs the gateway to read,
    rename or validate it beyond that check. ``data`` carries the gateway's ``_meta`` once
    finished."""

    data: dict[str, Any]

    @property
    def meta(self) -> dict[str, Any] | None:
        """The result's ``_meta`` (as a model's ``meta``)."""
        meta = self.data.get("_meta")
        return meta if isinstance(meta, dict) else None


#: What the fast lane passes through untouched: text content, structured content, the error flag
#: and ``_meta`` — nothing with a URI to rewrite (I18) or a shape the SDK would change.
_SIMPLE_KEYS = frozenset({"content", "structuredContent", "isError", "_meta", "resultType"})


def simple_call_result(raw: Any) -> bool:
    """Whether ``raw`` is a ``tools/call`` result the fast lane may pass through as JSON: every
    key known, text-only content, the right types; the wire form the SDK would make of it is
    then the same JSON (``tests/unit/test_passthrough.py`` checks the check). Anything
    else is validated into the SDK model and takes the normal lane's remaining steps."""
    if not isinstance(raw, dict) or not _SIMPLE_KEYS.issuperset(raw):
        return False
    content = raw.get("content")
    if not isinstance(content, list):
        return False
    for item in content:
        if not (
            isinstance(item, dict)
            and item.get("type") == "text"
            and isinstance(item.get("text"), str)
            and len(item) == 2
        ):
            return False
    return (
        isinstance(raw.get("isError", False), bool)
        and isinstance(raw.get("structuredContent", {}), dict)
        and isinstance(raw.get("_meta", {}), dict)
        and raw.get("resultType", "complete") == "complete"
    )
