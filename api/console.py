"""Operator-facing lines on stdout that can never take the gateway down (issue 10, item 10).

``serve`` prints its endpoint and every publication to stdout. stdout may be a file on a full
disk (``ENOSPC``), a pipe whose reader went away (``head -n 5``: ``EPIPE``) or closed outright.
Printing is a courtesy, never a duty: the first failed write turns the console off for good,
points file descriptor 1 at ``/dev/null`` (so nothing else that writes to stdout, including the
interpreter's final flush at exit, meets the broken stream again), and says so once in the log
(stderr)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import TextIO

log = logging.getLogger("mcp_reconciler.server")


class Console:
    """Best-effort line output. :meth:`say` never raises; :attr:`broken` tells whether output
    was given up (after the first failed write)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self.broken = False

    def say(self, line: str) -> None:
        """Write ``line`` and a newline, flushed; on any ``OSError`` or ``ValueError`` (a closed
        stream) give up on stdout, quietly."""
        if self.broken:
            return
        stream = self._stream if self._stream is not None else sys.stdout
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError) as exc:
            self.broken = True
            self._detach(stream)
            log.warning("stdout is not writable (%s); further status lines go nowhere", type(exc).__name__)

    @staticmethod
    def _detach(stream: TextIO) -> None:
        """Point the stream's descriptor at /dev/null and drop what is still buffered."""
        with contextlib.suppress(OSError, ValueError, AttributeError):
            fd = stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, fd)
            finally:
                os.close(devnull)
        # The buffered bytes now flush into /dev/null instead of failing again at exit.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
