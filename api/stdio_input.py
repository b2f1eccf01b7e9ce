"""The stdio gateway's stdin, read so that stopping the gateway can stop the reading (I14).

The SDK's ``stdio_server`` reads stdin with a blocking ``readline`` in a worker thread. A
thread blocked in ``read`` cannot be cancelled, so once the session is idle, SIGTERM or SIGINT
(``api/server.py``, ``run_stdio``) cancels everything except that read, and ``stdio_server``
waits for it to return. It returns only when the client writes a line or closes the pipe. An
agent host that signals its child while still holding the child's stdin (the usual way to stop
one) waited forever.

:func:`stdin_lines` reads stdin without a thread when stdin is a pipe or a socket. It waits on
the event loop for the descriptor to be readable, a cancellable point, and then reads what is
there. As the SDK's own claim does, it keeps the wire to itself: while it serves, fd 0 points at
the null device (a child or a handler reading stdin reads EOF), and fd 0 is restored on exit.
Any other stdin — a regular file, a terminal, ``/dev/null`` — ends or is interactive anyway, and
epoll refuses regular files; for those it yields ``None``, and ``stdio_server`` keeps its own
reader."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator

import anyio

#: The most read from the descriptor at once.
CHUNK_BYTES = 65536


class StdinLines:
    """UTF-8 lines (each with its ``\\n``; a last line without one is yielded at EOF) from the
    pipe or socket ``fd``, read on the event loop: cancelling the iterating task stops it at
    once. Invalid UTF-8 is replaced, as the SDK's reader does."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""
        self._eof = False

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line, self._buffer = self._buffer[: newline + 1], self._buffer[newline + 1 :]
                return line.decode("utf-8", errors="replace")
            if self._eof:
                if self._buffer:
                    line, self._buffer = self._buffer, b""
                    return line.decode("utf-8", errors="replace")
                raise StopAsyncIteration
            await anyio.wait_readable(self._fd)
            try:
                chunk = os.read(self._fd, CHUNK_BYTES)  # readable: returns at once (data or EOF)
            except BlockingIOError:  # another reader of the same pipe took it first
                continue
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True


@contextlib.contextmanager
def stdin_lines() -> Iterator[StdinLines | None]:
    """The process's stdin as :class:`StdinLines` while the block runs (fd 0 diverted to the null
    device meanwhile), or ``None`` when stdin is not a pipe or a socket (see the module
    docstring)."""
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        yield None
        return
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        yield None
        return
    private = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        yield StdinLines(private)
    finally:
        os.dup2(private, 0)
        os.close(private)
