"""Typing an upstream's raw result the way the SDK's ``send_request`` types it, with public
``mcp_types`` only (ADR 0037).

The gateway's session (``reconciler/jsonrpc_peer.py``) returns results as parsed JSON; a caller
that reads a result's fields types it here: the negotiated revision's own shape is checked
(``mcp_types.methods``), fields a *later* revision declares for the method are dropped (they are
outside the negotiated contract, and the version-free model would apply that revision's
constraints to them), and a negative ``ttlMs`` is floored to 0 (the 2026-07-28 caching rule), so
a malformed answer is the same validation error, whichever wire it came on."""

from __future__ import annotations

import contextlib
from functools import cache
from types import UnionType
from typing import Any, get_args

from mcp_types import methods
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS
from pydantic import BaseModel, TypeAdapter


def check_result(version: str, method: str, raw: dict[str, Any], result_type: Any) -> Any:
    """``raw`` (a result of ``method`` on a session at ``version``) typed as ``result_type`` (a
    pydantic model or ``TypeAdapter``); ``pydantic.ValidationError`` when it does not conform."""
    ttl = raw.get("ttlMs")
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl < 0:
        raw["ttlMs"] = 0
    with contextlib.suppress(KeyError, ValueError):
        methods.validate_server_result(method, version, raw)
    if not (foreign := later_revision_fields(method, version)).isdisjoint(raw):
        raw = {key: value for key, value in raw.items() if key not in foreign}
    if isinstance(result_type, TypeAdapter):
        return result_type.validate_python(raw, by_name=False)
    return result_type.model_validate(raw, by_name=False)


@cache
def later_revision_fields(method: str, version: str) -> frozenset[str]:
    """Result keys a revision newer than ``version`` declares for ``method`` that ``version``
    does not (empty at the newest revision, or for a method or version it does not know)."""
    current = methods.SERVER_RESULTS.get((method, version))
    if current is None or version not in KNOWN_PROTOCOL_VERSIONS:
        return frozenset()
    later: set[str] = set()
    for revision in KNOWN_PROTOCOL_VERSIONS[KNOWN_PROTOCOL_VERSIONS.index(version) + 1 :]:
        row = methods.SERVER_RESULTS.get((method, revision))
        if row is not None:
            later |= _wire_fields(row)
    return frozenset(later) - _wire_fields(current)


@cache
def _wire_fields(target: Any) -> frozenset[str]:
    members: tuple[Any, ...] = get_args(target) if isinstance(target, UnionType) else (target,)
    fields: set[str] = set()
    for model in members:
        if isinstance(model, type) and issubclass(model, BaseModel):
            fields.update(field.alias or name for name, field in model.model_fields.items())
    return frozenset(fields)
