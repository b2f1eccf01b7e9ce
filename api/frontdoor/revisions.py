"""Revision choice: which live generation serves a request.

In order of precedence: the revision named in the request's ``_meta``
(``io.mcp-reconciler/revision``), the ``MCP-Reconciler-Revision`` header, the session's pinned
revision, else the current generation. A named revision that is not live is an error
(``revision_unavailable``), never a silent fallback to another one: a client that asked for a
revision must see exactly that catalog or be told it cannot.

A revision value is a plain non-negative integer, nothing that merely converts to one
(:func:`parse_revision`): in ``_meta`` a JSON integer (not ``true``, not ``1.9``, not a
string), in the header ASCII digits only (not ``+1``, `` 1``, ``1_0``, non-ASCII digits). Anything else
is -32602 ``invalid_revision`` — a client that asked for a revision it did not mean must not be
served some other one.

A request that names a revision may also name the catalog it expects under that number: the
replica-independent content digest (``io.mcp-reconciler/digest`` in ``_meta``, or the
``MCP-Reconciler-Digest`` header; a hold's answer carries it, and the SDK's ``pinned()`` sends it).
Across replicas (ADR 0020) revision numbers come from one ledger, but a replica may serve a
revision of its own numbering (it could not reach the ledger); if the named revision's digest
differs, the answer is a retryable ``revision_unavailable``, never the other catalog."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mcp import MCPError
from mcp.server import ServerRequestContext

from mcp_reconciler.api.errors import CODES, to_mcp_error
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.reconciler.authority import Session
from mcp_reconciler.reconciler.errors import ReconcilerClosedError, RevisionUnavailableError
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.runtime import LiveGeneration

REVISION_META = "io.mcp-reconciler/revision"
_DIGITS = re.compile(r"[0-9]{1,18}")  # ASCII only; fullmatch, so no sign, space, "_" or newline
DRIFT_META = "io.mcp-reconciler/drifted"
REVISION_HEADER = "mcp-reconciler-revision"
DIGEST_META = "io.mcp-reconciler/digest"
DIGEST_HEADER = "mcp-reconciler-digest"
_DIGEST = re.compile(r"[0-9a-f]{16,128}")


def request_header(request: Any, name: str) -> str | None:
    """The first value of the lower-case header ``name`` of an HTTP ``request`` (``None`` without
    one, or on stdio), read off Starlette's raw header list: its ``Headers.get`` raises and
    catches a ``KeyError`` for every absent header, ~1.5 % of a forwarded call (ADR 0038)."""
    headers = getattr(request, "headers", None)
    raw = getattr(headers, "raw", None)
    if raw is None:
        return headers.get(name) if headers is not None else None
    key = name.encode("latin-1")
    for k, v in raw:
        if k == key:
            return str(v.decode("latin-1"))
    return None


def header_revision(ctx: ServerRequestContext[Any]) -> str | None:
    """The raw ``MCP-Reconciler-Revision`` header of an HTTP request (``None`` on stdio)."""
    return request_header(ctx.request, REVISION_HEADER)


def parse_revision(value: object, *, text: bool) -> int:
    """``value`` as a revision: a non-negative ``int`` (never a ``bool``) from JSON ``_meta``
    (``text=False``), or a string of ASCII digits from a header (``text=True``). Raises
    ``MCPError(-32602, invalid_revision)`` for anything else."""
    if not text and type(value) is int and value >= 0:
        return value
    if text and isinstance(value, str) and _DIGITS.fullmatch(value) is not None:
        return int(value)
    raise MCPError(
        -32602,
        "the requested revision must be a plain non-negative integer (digits only)",
        {"code": "invalid_revision", "retryable": False},
    )


def _expected_digest(ctx: ServerRequestContext[Any], meta: Mapping[str, Any] | None) -> str | None:
    """The content digest a request names (``_meta`` first, then the header), or ``None``.
    Raises ``invalid_revision`` for a value that is not a lowercase hex digest."""
    value: Any = (meta or {}).get(DIGEST_META)
    if value is None and ctx.request is not None:
        value = ctx.request.headers.get(DIGEST_HEADER)
    if value is None:
        return None
    if isinstance(value, str) and _DIGEST.fullmatch(value) is not None:
        return value
    raise MCPError(
        -32602,
        "the requested catalog digest must be the lowercase hex digest a hold answered with",
        {"code": "invalid_revision", "retryable": False},
    )


def choose_generation(
    catalog: CatalogAccess,
    ctx: ServerRequestContext[Any],
    session: Session,
    meta: Mapping[str, Any] | None,
    *,
    prefer: int | None = None,
) -> LiveGeneration:
    """The live generation this request runs on (precedence in the module docstring; ``prefer``
    — the revision a multi-round exchange started on — comes after the session's pin and is
    used only while it is live). Raises an ``MCPError``: ``invalid_revision`` (not an integer),
    ``revision_unavailable`` (not live), ``closed`` (the engine is shutting down) or
    ``starting`` (nothing published yet, retryable)."""
    wanted: Any = (meta or {}).get(REVISION_META)
    header = header_revision(ctx)
    revision: int | None
    if wanted is not None:
        revision = parse_revision(wanted, text=False)
    elif header is not None:
        revision = parse_revision(header, text=True)
    else:
        revision = session.pinned_revision
    if revision is not None:
        try:
            named = catalog.get(revision)
        except Exception as exc:
            raise to_mcp_error(exc) from None
        expected = _expected_digest(ctx, meta)
        if expected is not None and expected != named.content_digest:
            raise MCPError(
                CODES[RevisionUnavailableError.code],
                f"revision {revision} here is a different catalog than the one the request names (digest "
                "mismatch: another replica numbered it); retry, or hold a revision again",
                {"code": "revision_unavailable", "retryable": True, "revision": revision},
            )
        return named
    if prefer is not None and not catalog.closed:
        try:
            return catalog.get(prefer)
        except Exception:
            pass  # retired meanwhile: the current generation serves the retry
    if catalog.closed:
        raise to_mcp_error(ReconcilerClosedError())
    live = catalog.current()
    if live is None:
        raise MCPError(-32015, "no catalog is published yet; retry shortly", {"code": "starting", "retryable": True})
    return live


def header_generation(catalog: CatalogAccess, ctx: ServerRequestContext[Any]) -> Generation | None:
    """The live generation a client's ``MCP-Reconciler-Revision`` header names, if any: a
    connection that asks for a revision from its first request gets its grants from that
    revision (policy ``current``: the names it can see when the session is created), not from a
    newer current generation that may lack them. Not live or not a number: ``None`` (the request
    itself then answers the error)."""
    wanted = header_revision(ctx)
    if wanted is None:
        return None
    try:
        return catalog.get(parse_revision(wanted, text=True)).generation
    except Exception:
        return None
