"""Revision choice: which live generation serves a request.

In order of precedence: the revision named in the request's ``_meta``
(``io.mcp-reconciler/revision``), the ``MCP-Reconciler-Revision`` header, the session's pinned
revision, else the current generation. A named revision that is not live is an error
(``revision_unavailable``), never a silent fallback to another one: a client that asked for a
revision must see exactly that catalog or be told it cannot."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp import MCPError
from mcp.server import ServerRequestContext

from mcp_reconciler.api.errors import to_mcp_error
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.reconciler.authority import Session
from mcp_reconciler.reconciler.errors import ReconcilerClosedError
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.runtime import LiveGeneration

REVISION_META = "io.mcp-reconciler/revision"
DRIFT_META = "io.mcp-reconciler/drifted"
REVISION_HEADER = "mcp-reconciler-revision"


def header_revision(ctx: ServerRequestContext[Any]) -> str | None:
    """The raw ``MCP-Reconciler-Revision`` header of an HTTP request (``None`` on stdio)."""
    return ctx.request.headers.get(REVISION_HEADER) if ctx.request is not None else None


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
    if wanted is None:
        wanted = header_revision(ctx)
    if wanted is None:
        wanted = session.pinned_revision
    if wanted is not None:
        try:
            revision = int(wanted)
        except (TypeError, ValueError):
            raise MCPError(-32602, "the requested revision must be an integer", {"code": "invalid_revision"}) from None
        try:
            return catalog.get(revision)
        except Exception as exc:
            raise to_mcp_error(exc) from None
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
        return catalog.get(int(wanted)).generation
    except Exception:
        return None
