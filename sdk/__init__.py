"""Python client for mcp-reconciler: the control API (async and sync) and revision-pinned MCP runs."""

from sdk.client import PinnedRun, ReconcilerClient
from sdk.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    ReconcilerAPIError,
    RefreshTimeout,
    ServerError,
    TooManyRequests,
    Unauthenticated,
    Unavailable,
    Unreachable,
)
from sdk.sync import SyncReconcilerClient

__all__ = [
    "Conflict",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "PinnedRun",
    "ReconcilerAPIError",
    "ReconcilerClient",
    "RefreshTimeout",
    "ServerError",
    "SyncReconcilerClient",
    "TooManyRequests",
    "Unauthenticated",
    "Unavailable",
    "Unreachable",
]
