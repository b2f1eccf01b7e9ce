"""The stdio gateway's wire: stdin read so that stopping the gateway can stop the reading (I14),
each line bounded while it is read (I18), and stdout kept to the protocol.

**Stopping.** A blocking ``read`` in a worker thread (the SDK's ``stdio_server``) cannot be
cancelled: once the session is idle, SIGTERM or SIGINT (``api/server.py``, ``run_stdio``) would
cancel everything except that read, which returns only when the client writes a line or closes
the pipe. An agent host that signals its child while still holding the child's stdin (the usual
way to stop one) would wait forever. :class:`StdinLines` waits on the event loop for the
descriptor to be readable (a cancellable point) and then reads what is there. Descriptors epoll
refuses (a regular file, ``/dev/null``) never block a read, so those are read directly.

**The line bound.** A line is measured as it grows (:class:`~reconciler.stdio_peer.LineSplitter`,
the upstream channel's linear splitter): past ``limit`` bytes (``gateway.limits.body_bytes``, the
bound of a ``/mcp`` body) it stops being kept, is yielded once as a
:class:`~reconciler.stdio_peer.Refused` carrying its first bytes (so the plane can answer the
request it names) and the rest is skipped to its newline; the session keeps serving.

**The wire is ours.** As the SDK's stream claim does, while :func:`stdio_wire` serves, fd 0
points at the null device (a child or a handler reading stdin reads EOF) and fd 1 at stderr (a
stray ``print`` misses the protocol); both are restored on exit."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Awaitable, Callable, Iterator

import anyio
import anyio.lowlevel

from mcp_reconciler.reconciler.stdio_peer import LineSplitter, Refused, Skipped

log = logging.getLogger("mcp_reconciler.stdio")

#: The most read from the descriptor at once.
CHUNK_BYTES = 65536
#: The config key of the line bound (named in the error a refused request gets).
LINE_BOUND_KEY = "limits.body_bytes"

Write = Callable[[bytes], Awaitable[None]]


class StdinLines:
    """Lines (without their ``\\n``; blank lines dropped; a last line without one is yielded at
    EOF) read from ``fd``, each at most ``limit`` bytes: a longer one is yielded as a
    :class:`Refused` instead (module docstring). On a pipe, socket or terminal the read waits on
    the event loop: cancelling the iterating task stops it at once."""

    def __init__(self, fd: int, limit: int) -> None:
        self._fd = fd
        self._limit = limit
        self._splitter = LineSplitter(limit, limit_for=lambda _prefix: (LINE_BOUND_KEY, limit))
        self._ready: list[bytes | Refused] = []
        self._eof = False
        try:
            mode = os.fstat(fd).st_mode
            self._pollable = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)
        except OSError:
            self._pollable = False

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> bytes | Refused:
        while not self._ready:
            if self._eof:
                raise StopAsyncIteration
            await self._read()
        return self._ready.pop(0)

    async def _read(self) -> None:
        if self._pollable:
            await anyio.wait_readable(self._fd)
        else:
            await anyio.lowlevel.checkpoint()  # a file's read returns at once: stay cancellable
        try:
            chunk = os.read(self._fd, CHUNK_BYTES)  # readable: returns at once (data or EOF)
        except BlockingIOError:  # another reader of the same pipe took it first
            return
        except OSError as exc:  # a closed or broken stdin ends the session as EOF does
            log.info("stdin: read failed (%s): ending the session", exc.strerror)
            chunk = b""
        if not chunk:
            self._eof = True
            chunk = b"\n"  # ends a last line that has no newline
        for item in self._splitter.feed(chunk):
            if isinstance(item, Skipped):
                log.warning(
                    "stdin: skipped a line of %d bytes, over %s (%d bytes)", item.size, LINE_BOUND_KEY, self._limit
                )
            elif isinstance(item, bytes):
                self._ready.append(_valid_utf8(item))
            else:
                self._ready.append(item)


def _valid_utf8(line: bytes) -> bytes:
    """``line``, its invalid UTF-8 replaced (U+FFFD), as the SDK's stdio reader does."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return line.decode("utf-8", errors="replace").encode("utf-8")
    return line


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class StdoutLines:
    """Writes messages to ``fd`` whole, in a worker thread (a client slow to read stdout never
    blocks the event loop). The caller writes one at a time (the plane's lock)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def __call__(self, data: bytes) -> None:
        """Write ``data`` (whole) to the descriptor."""
        await anyio.to_thread.run_sync(_write_all, self._fd, data)


@contextlib.contextmanager
def _claim(fd: int, diversion: Callable[[], int]) -> Iterator[int]:
    """A private duplicate of ``fd`` while ``fd`` itself points at ``diversion()``; restored on exit."""
    private = os.dup(fd)
    try:
        target = diversion()
        try:
            os.dup2(target, fd)
        finally:
            os.close(target)
        try:
            yield private
        finally:
            os.dup2(private, fd)
    finally:
        os.close(private)


@contextlib.contextmanager
def stdio_wire(limit: int) -> Iterator[tuple[StdinLines, Write]]:
    """The process's stdin as :class:`StdinLines` bounded at ``limit`` bytes a line, and a writer
    of stdout, while the block runs (fd 0 and fd 1 diverted meanwhile; module docstring)."""
    with (
        _claim(0, lambda: os.open(os.devnull, os.O_RDONLY)) as stdin,
        _claim(1, lambda: os.dup(2)) as stdout,
    ):
        yield StdinLines(stdin, limit), StdoutLines(stdout)
