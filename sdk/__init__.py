"""Python client for mcp-reconciler: the control API (async and sync) and revision-pinned MCP runs."""

from mcp_reconciler.sdk.auth import CommandTokenProvider, TokenProvider, TokenProviderError
from mcp_reconciler.sdk.client import PinnedRun, ReconcilerClient
from mcp_reconciler.sdk.errors import (
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
from mcp_reconciler.sdk.sync import SyncReconcilerClient

__all__ = [
    "CommandTokenProvider",
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
    "TokenProvider",
    "TokenProviderError",
    "TooManyRequests",
    "Unauthenticated",
    "Unavailable",
    "Unreachable",
]
