"""Bounded waits for what no event announces — the one place tests poll.

Waiting on an event, a stream, a process's exit (``await proc.wait()`` under ``fail_after``, or
:func:`exited` for a ``subprocess.Popen``) or a log line is always preferred. What is left is
state another process changes (a file it writes, its readiness endpoint) or engine state that
changes off the test's control flow with no event to wait on; each such wait goes through
:func:`until` (or :func:`file_text`, :func:`no_pins`), never an ad-hoc ``while ...: sleep`` loop,
so that every poll is bounded, names what it waited for when it times out, and is easy to find
(``tests/unit/test_no_sleep_waits.py`` fails on a new ``sleep`` in tests/ without a reason)."""

from __future__ import annotations

import inspect
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    from mcp_reconciler.api.server import Served

#: A hang guard, not a timing: long enough for a loaded CI machine late in a full run.
WAIT_S = 20.0
#: How often a poll looks again: the state polled changes in another process or off the loop's
#: turn, so a shorter period only costs CPU the code under test needs.
POLL_S = 0.02


async def until(
    predicate: Callable[[], bool | Awaitable[bool]],
    *,
    what: str | Callable[[], str],
    timeout_s: float = WAIT_S,
    every_s: float = POLL_S,
) -> None:
    """Return once ``predicate()`` (sync or async) is true; check it every ``every_s``. Raises
    ``AssertionError`` naming ``what`` (a callable: the state at the timeout) after ``timeout_s``."""

    async def holds() -> bool:
        got = predicate()
        return bool(await got) if inspect.isawaitable(got) else bool(got)

    try:
        with anyio.fail_after(timeout_s):
            while not await holds():
                await anyio.sleep(every_s)  # the one bounded poll (module docstring)
    except TimeoutError:
        said = what if isinstance(what, str) else what()
        raise AssertionError(f"timed out after {timeout_s} s waiting for {said}") from None


async def exited(proc: subprocess.Popen[Any], *, timeout_s: float = WAIT_S) -> int:
    """``proc``'s exit code once it has exited: a worker thread blocks in ``proc.wait`` (the exit
    itself, not a poll of it). Raises ``AssertionError`` after ``timeout_s``; the process is then
    still the caller's to stop."""
    try:
        return await anyio.to_thread.run_sync(proc.wait, timeout_s)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{proc.args!r} did not exit within {timeout_s} s") from None


async def file_text(
    path: Path, *, writer_exit: Callable[[], int | None] | None = None, timeout_s: float = WAIT_S
) -> str:
    """The text of ``path`` once another process has written it (non-empty). ``writer_exit`` gives that
    process's exit code once it has one: a writer that died is reported, not waited for."""
    text = ""

    async def written() -> bool:
        nonlocal text
        try:
            text = await anyio.Path(path).read_text()
        except FileNotFoundError:
            text = ""
        if not text and writer_exit is not None and (code := writer_exit()) is not None:
            raise RuntimeError(f"the process that writes {path} exited with {code} before it did")
        return bool(text)

    await until(written, what=f"{path} to be written", timeout_s=timeout_s)
    return text


async def no_pins(served: Served, timeout_s: float = WAIT_S) -> None:
    """Until every live generation's pins are released: an operation settles server-side just
    after its client has the outcome, and the engine announces no "pins reached zero" event
    (only a retiring generation's close, which a current generation never has)."""
    runtime = served.gateway.rec.runtime
    await until(lambda: not any(live.pins for live in runtime.live()), what="every pin released", timeout_s=timeout_s)
