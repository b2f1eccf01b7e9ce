"""mcp-reconciler engine: immutable catalog generations, pins, bounded retirement, and the
coalescing reconcile loop. Nothing in this package imports an HTTP framework; the edges in
``api/`` adapt to it."""

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.errors import (
    CycleFailedError,
    GenerationDrainedError,
    ReconcilerClosedError,
    RevisionUnavailableError,
    SourceReadError,
)
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import CatalogEntry, Diagnostic, EntryKind, SourceSpec, SourceState, SourceStatus
from mcp_reconciler.reconciler.pins import Operation, Pin
from mcp_reconciler.reconciler.reconcile import CycleOutcome, Reconciler
from mcp_reconciler.reconciler.runtime import LiveGeneration, Runtime

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
