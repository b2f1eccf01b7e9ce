"""A blocking facade over :class:`sdk.client.ReconcilerClient` for scripts and the CLI.

Each call runs on a private event loop thread (an anyio blocking portal) owned by the client;
``close()`` (or the ``with`` block) stops it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from mcp_reconciler.sdk import wire
from mcp_reconciler.sdk.auth import TokenProvider
from mcp_reconciler.sdk.client import ReconcilerClient

T = TypeVar("T")


class SyncReconcilerClient:
    """A blocking :class:`~sdk.client.ReconcilerClient`: same methods, answers and errors, run on a
    private event-loop thread it owns. Call :meth:`close` (or use ``with``) to stop that thread; safe
    to call from any thread but that loop's own."""

    def __init__(
        self, base_url: str = "http://127.0.0.1:8765", token: str | TokenProvider | None = None, **kwargs: Any
    ) -> None:
        self._cm: AbstractContextManager[BlockingPortal] = start_blocking_portal()
        self._portal = self._cm.__enter__()
        try:
            self._client: ReconcilerClient = self._portal.call(lambda: _make(base_url, token, kwargs))
        except BaseException:
            self._cm.__exit__(None, None, None)  # don't leak the portal's thread
            raise

    def __enter__(self) -> SyncReconcilerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the client, then stop its event-loop thread (even if closing failed); unusable afterwards."""
        try:
            self._portal.call(self._client.aclose)
        finally:
            self._cm.__exit__(None, None, None)

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._portal.call(lambda: fn(*args, **kwargs))

    def healthz(self) -> bool:
        """Blocking :meth:`ReconcilerClient.healthz`."""
        return self._call(self._client.healthz)  # type: ignore[no-any-return]

    def readyz(self) -> wire.ReadyOut:
        """Blocking :meth:`ReconcilerClient.readyz`."""
        return self._call(self._client.readyz)  # type: ignore[no-any-return]

    def status(self) -> wire.StatusOut:
        """Blocking :meth:`ReconcilerClient.status`."""
        return self._call(self._client.status)  # type: ignore[no-any-return]

    def refresh(self, sources: Sequence[str] | None = None, *, wait: bool = True, timeout_s: float = 30.0) -> Any:
        """Blocking :meth:`ReconcilerClient.refresh`: a RefreshOut, or a RefreshAccepted when not ``wait``."""
        return self._call(self._client.refresh, sources, wait=wait, timeout_s=timeout_s)

    def generations(self) -> wire.GenerationsOut:
        """Blocking :meth:`ReconcilerClient.generations`."""
        return self._call(self._client.generations)  # type: ignore[no-any-return]

    def catalog(self, revision: int | None = None) -> wire.CatalogOut:
        """Blocking :meth:`ReconcilerClient.catalog`."""
        return self._call(self._client.catalog, revision)  # type: ignore[no-any-return]

    def sources(self) -> list[wire.SourceOut]:
        """Blocking :meth:`ReconcilerClient.sources`."""
        return self._call(self._client.sources)  # type: ignore[no-any-return]

    def source(self, name: str) -> wire.SourceOut:
        """Blocking :meth:`ReconcilerClient.source`."""
        return self._call(self._client.source, name)  # type: ignore[no-any-return]

    def sessions(self) -> list[wire.SessionOut]:
        """Blocking :meth:`ReconcilerClient.sessions`."""
        return self._call(self._client.sessions)  # type: ignore[no-any-return]

    def session(self, session_id: str) -> wire.SessionOut:
        """Blocking :meth:`ReconcilerClient.session`."""
        return self._call(self._client.session, session_id)  # type: ignore[no-any-return]

    def delete_session(self, session_id: str) -> None:
        """Blocking :meth:`ReconcilerClient.delete_session`."""
        self._call(self._client.delete_session, session_id)

    def refresh_session(self, session_id: str) -> wire.SessionRefreshOut:
        """Blocking :meth:`ReconcilerClient.refresh_session`."""
        return self._call(self._client.refresh_session, session_id)  # type: ignore[no-any-return]

    def create_session(self, **kwargs: Any) -> wire.SessionCreated:
        """Blocking :meth:`ReconcilerClient.create_session` (same keyword arguments)."""
        return self._call(self._client.create_session, **kwargs)  # type: ignore[no-any-return]

    def grant(self, session_id: str, names: Sequence[str]) -> wire.GrantsOut:
        """Blocking :meth:`ReconcilerClient.grant`."""
        return self._call(self._client.grant, session_id, names)  # type: ignore[no-any-return]

    def revoke(self, session_id: str, names: Sequence[str]) -> wire.RevokedOut:
        """Blocking :meth:`ReconcilerClient.revoke`."""
        return self._call(self._client.revoke, session_id, names)  # type: ignore[no-any-return]

    def hold(self, revision: int, *, ttl_s: float = 600.0) -> wire.HoldOut:
        """Blocking :meth:`ReconcilerClient.hold`."""
        return self._call(self._client.hold, revision, ttl_s=ttl_s)  # type: ignore[no-any-return]

    def release_hold(self, hold_id: str) -> None:
        """Blocking :meth:`ReconcilerClient.release_hold`."""
        self._call(self._client.release_hold, hold_id)

    def approvals(self, *, pending: bool = False) -> list[wire.ApprovalOut]:
        """Blocking :meth:`ReconcilerClient.approvals`."""
        return self._call(self._client.approvals, pending=pending)  # type: ignore[no-any-return]

    def approve(self, approval_id: str, *, uses: int = 1, window_s: float = 0.0) -> wire.ApprovalOut:
        """Blocking :meth:`ReconcilerClient.approve`."""
        return self._call(self._client.approve, approval_id, uses=uses, window_s=window_s)  # type: ignore[no-any-return]

    def deny(self, approval_id: str) -> wire.ApprovalOut:
        """Blocking :meth:`ReconcilerClient.deny`."""
        return self._call(self._client.deny, approval_id)  # type: ignore[no-any-return]


async def _make(base_url: str, token: str | TokenProvider | None, kwargs: dict[str, Any]) -> ReconcilerClient:
    return ReconcilerClient(base_url, token, **kwargs)
