"""mcp-reconciler engine: immutable catalog generations, pins, bounded retirement, and the
coalescing reconcile loop. Nothing in this package imports an HTTP framework; the edges in
``api/`` adapt to it.

The public names below are imported on first use (PEP 562), not with the package: a submodule
import such as ``reconciler.backoff`` (the SDK's one engine import, standard library only) or
``reconciler.telemetry`` must not pay for the whole engine and ``mcp_types`` (~0.4 s per
operator-CLI process)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp_reconciler.reconciler.bounds import Bounds
    from mcp_reconciler.reconciler.errors import (
        CycleFailedError,
        GenerationDrainedError,
        ReconcilerClosedError,
        RevisionUnavailableError,
        SourceReadError,
    )
    from mcp_reconciler.reconciler.generation import Generation
    from mcp_reconciler.reconciler.model import (
        CatalogEntry,
        Diagnostic,
        EntryKind,
        SourceSpec,
        SourceState,
        SourceStatus,
    )
    from mcp_reconciler.reconciler.pins import Operation, Pin
    from mcp_reconciler.reconciler.reconcile import CycleOutcome, Reconciler
    from mcp_reconciler.reconciler.runtime import LiveGeneration, Runtime

_LAZY: dict[str, str] = {
    "Bounds": "mcp_reconciler.reconciler.bounds",
    "CatalogEntry": "mcp_reconciler.reconciler.model",
    "CycleFailedError": "mcp_reconciler.reconciler.errors",
    "CycleOutcome": "mcp_reconciler.reconciler.reconcile",
    "Diagnostic": "mcp_reconciler.reconciler.model",
    "EntryKind": "mcp_reconciler.reconciler.model",
    "Generation": "mcp_reconciler.reconciler.generation",
    "GenerationDrainedError": "mcp_reconciler.reconciler.errors",
    "LiveGeneration": "mcp_reconciler.reconciler.runtime",
    "Operation": "mcp_reconciler.reconciler.pins",
    "Pin": "mcp_reconciler.reconciler.pins",
    "Reconciler": "mcp_reconciler.reconciler.reconcile",
    "ReconcilerClosedError": "mcp_reconciler.reconciler.errors",
    "RevisionUnavailableError": "mcp_reconciler.reconciler.errors",
    "Runtime": "mcp_reconciler.reconciler.runtime",
    "SourceReadError": "mcp_reconciler.reconciler.errors",
    "SourceSpec": "mcp_reconciler.reconciler.model",
    "SourceState": "mcp_reconciler.reconciler.model",
    "SourceStatus": "mcp_reconciler.reconciler.model",
}

__all__ = [
    "Bounds",
    "CatalogEntry",
    "CycleFailedError",
    "CycleOutcome",
    "Diagnostic",
    "EntryKind",
    "Generation",
    "GenerationDrainedError",
    "LiveGeneration",
    "Operation",
    "Pin",
    "Reconciler",
    "ReconcilerClosedError",
    "RevisionUnavailableError",
    "Runtime",
    "SourceReadError",
    "SourceSpec",
    "SourceState",
    "SourceStatus",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use; unknown names (and submodules, which the
    import system then loads itself) raise ``AttributeError`` as usual."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
