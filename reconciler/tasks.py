"""Background task groups owned by an object, for assembly on an ``AsyncExitStack``.

An anyio task group entered around a caller's code wraps the caller's own exception into an
``ExceptionGroup`` when it exits with it. The engine's objects (runtime, reader, reconciler,
engine) run background tasks — retirements, connection holders, the loop, watchers — that are
theirs, not the caller's: :func:`background_tasks` gives them a task group that is cancelled and
reaped on exit without taking the body's exception, so ``async with`` on an engine object lets
the caller's exception through unchanged (a failure of a background task still propagates).

This is the one place that enters and exits a task group by hand; everything else composes
context managers on an ``AsyncExitStack``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import TaskGroup


@asynccontextmanager
async def background_tasks() -> AsyncIterator[TaskGroup]:
    """A task group whose tasks are cancelled and awaited when the block exits, however it exits.

    Guarantees: no task started in it outlives the block; the block's own exception (or
    cancellation) propagates as is, never wrapped; an exception raised by a task propagates
    from the exit (as anyio raises it)."""
    tg = anyio.create_task_group()
    await tg.__aenter__()
    try:
        yield tg
    finally:
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)
