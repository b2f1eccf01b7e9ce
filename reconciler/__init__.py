"""mcp-reconciler engine: immutable catalog generations, pins, bounded retirement, and the
coalescing reconcile loop. Nothing in this package imports an HTTP framework; the edges in
``api/`` adapt to it."""

from reconciler.bounds import Bounds
from reconciler.errors import (
    CycleFailedError,
    GenerationDrainedError,
    ReconcilerClosedError,
    RevisionUnavailableError,
    SourceReadError,
)
from reconciler.generation import Generation
from reconciler.model import CatalogEntry, Diagnostic, EntryKind, SourceSpec, SourceState, SourceStatus
from reconciler.pins import Operation, Pin
from reconciler.reconcile import CycleOutcome, Reconciler
from reconciler.runtime import LiveGeneration, Runtime

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
