"""Which tools can run as tasks, and keeping the catalog honest about it (ADR 0016).

Tasks (task-augmented ``tools/call``, ``tasks/get|result|list|cancel``) exist in the 2025-11-25
protocol only; 2026-07-28 moved them out of the core into an extension the ``mcp`` 2.3 SDK does
not implement. A source can run a tool as a task when its connection speaks 2025-11-25 and the
server advertises ``tasks.requests.tools.call``; a tool says whether it may or must run as one in
``execution.taskSupport`` (absent means ``forbidden``).

A source that lists a tool with ``taskSupport`` but cannot run tasks (no capability, or a
2026-era connection) would have the gateway advertise what it cannot serve. So, when a source is
listed (:func:`honest_listing`): a ``required`` tool is left out with a ``task_unsupported``
diagnostic; an ``optional`` one is kept with its ``execution`` removed (it runs as an ordinary
call). Through a source that can run tasks, every tool is kept as it is."""

from __future__ import annotations

import json
from typing import Any, Literal

import mcp_types as types

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.catalog import bounded, make_entry
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import CatalogEntry, Diagnostic, EntryKind, SourceSpec

TaskSupport = Literal["forbidden", "optional", "required"]

_MARKER = b'"taskSupport"'
_REQUIRED = b'"taskSupport":"required"'  # definitions are canonical JSON (sorted, compact)


def runs_tool_tasks(protocol_version: str | None, capabilities: types.ServerCapabilities | None) -> bool:
    """Whether a connection can run ``tools/call`` as a task: 2025-11-25, and the server
    advertises ``tasks.requests.tools.call``."""
    if not (protocol_version or "").startswith("2025") or capabilities is None or capabilities.tasks is None:
        return False
    requests = capabilities.tasks.requests
    return requests is not None and requests.tools is not None and requests.tools.call is not None


def task_support(entry: CatalogEntry) -> TaskSupport:
    """A tool's ``execution.taskSupport`` (``forbidden`` when absent). Cheap for the common case:
    only definitions that mention it are parsed."""
    if entry.kind is not EntryKind.TOOL or _MARKER not in entry.raw:
        return "forbidden"
    if _REQUIRED in entry.raw:
        return "required"
    value = (json.loads(entry.raw).get("execution") or {}).get("taskSupport")
    return value if value in ("optional", "required") else "forbidden"


def required_tool_names(generation: Generation) -> frozenset[str]:
    """The served names of the tools that require a task in ``generation``: the catalog's and
    every named view's (a view may serve a tool under a name of its own, ADR 0026)."""
    tables = [generation.tools, *(routes[EntryKind.TOOL] for routes in generation.catalog.views.values())]
    return frozenset(n for table in tables for n, e in table.items() if task_support(e) == "required")


def honest_listing(
    entries: tuple[CatalogEntry, ...], spec: SourceSpec, bounds: Bounds, *, runs_tasks: bool
) -> tuple[tuple[CatalogEntry, ...], tuple[Diagnostic, ...]]:
    """``entries`` as the gateway can serve them (module docstring), and the diagnostics for the
    tools left out. The same tuple when nothing needed changing."""
    if runs_tasks or not any(e.kind is EntryKind.TOOL and _MARKER in e.raw for e in entries):
        return entries, ()
    kept: list[CatalogEntry] = []
    diagnostics: list[Diagnostic] = []
    for entry in entries:
        support = task_support(entry)
        if support == "required":
            diagnostics.append(
                Diagnostic(
                    code="task_unsupported",
                    source=spec.name,
                    name=entry.exposed_name,
                    message=bounded(
                        f"tool {entry.upstream_name!r} requires task-augmented calls, which source "
                        f"{spec.name!r} does not offer on this connection (no tasks capability, or the "
                        "2026-07-28 protocol); left out",
                        bounds.diagnostic_bytes,
                    ),
                )
            )
        elif support == "optional":
            definition: dict[str, Any] = json.loads(entry.raw)
            definition.pop("execution", None)
            kept.append(make_entry(spec, EntryKind.TOOL, entry.upstream_name, definition))
        else:
            kept.append(entry)
    return tuple(kept), tuple(diagnostics)
