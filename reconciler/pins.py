"""Pins and operations: counted references that keep a generation open (I4).

A ``Pin`` is the cheap primitive (no I/O, O(1), no lock): ``acquire`` increments a counter and
``release`` decrements it, idempotently. An ``Operation`` is a pin plus a cancel scope, so the
runtime can cancel work still running at a generation's drain deadline (I5); the operation then
raises :class:`GenerationDrainedError` naming the revision — a clear, retryable error."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

import anyio

from mcp_reconciler.reconciler.errors import GenerationDrainedError, ReconcilerClosedError
from mcp_reconciler.reconciler.errors import (  # re-exported until api/frontdoor.py imports it from errors
    OperationDeadlineError as OperationDeadlineError,
)

if TYPE_CHECKING:
    from mcp_reconciler.reconciler.runtime import LiveGeneration


class Pin:
    """One counted reference on a live generation. Use as a (sync) context manager or call
    :meth:`release`; releasing twice is harmless."""

    __slots__ = ("_live", "_released")

    def __init__(self, live: LiveGeneration) -> None:
        self._live = live
        self._released = False

    @property
    def live(self) -> LiveGeneration:
        """The live generation this pin keeps open."""
        return self._live

    def release(self) -> None:
        """Release the pin: idempotent, O(1), no I/O; the last pin on a retiring generation closes it (I4)."""
        if not self._released:
            self._released = True
            self._live._unpin()

    def __enter__(self) -> Pin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Operation:
    """``async with live.operation() as op:`` — pins the generation for the body's duration.

    Guarantees: the pin is released on every exit path (return, exception, cancellation); if
    the runtime force-drains the generation, the body is cancelled and the block raises
    :class:`GenerationDrainedError`; if ``deadline_s`` passes, it raises
    :class:`OperationDeadlineError`. Other exceptions and outer cancellations propagate."""

    __slots__ = ("_closing", "_deadline_s", "_drained", "_live", "_pin", "_scope")

    def __init__(self, live: LiveGeneration, deadline_s: float | None) -> None:
        self._live = live
        self._deadline_s = deadline_s
        self._pin: Pin | None = None
        self._scope: anyio.CancelScope | None = None
        self._drained = False
        self._closing = False

    @property
    def live(self) -> LiveGeneration:
        """The live generation this operation runs on."""
        return self._live

    @property
    def revision(self) -> int:
        """The revision this operation runs on."""
        return self._live.revision

    def _force_cancel(self, *, closing: bool = False) -> None:
        self._drained = True
        self._closing = closing
        if self._scope is not None:
            self._scope.cancel()

    async def __aenter__(self) -> Operation:
        self._pin = self._live.pin()
        deadline = anyio.current_time() + self._deadline_s if self._deadline_s is not None else float("inf")
        self._scope = anyio.CancelScope(deadline=deadline)
        self._scope.__enter__()
        self._live._operations.add(self)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        assert self._scope is not None and self._pin is not None
        self._live._operation_done(self)
        try:
            swallowed = self._scope.__exit__(exc_type, exc, tb)
        finally:
            self._pin.release()
        if swallowed and self._scope.cancelled_caught:
            if self._drained and self._closing:
                raise ReconcilerClosedError()
            if self._drained:
                raise GenerationDrainedError(self._live.revision)
            raise OperationDeadlineError(self._deadline_s or 0.0)
        return bool(swallowed)
