"""Which upstream source a log record is about, and an upstream's stderr as log records
(issue 10, items 8 and 11).

:data:`current_source` is set by an upstream connection's task before its transport starts, so
every task the transport spawns (the SDK's stdout reader, its stdin writer) inherits it: a record
logged by the SDK about malformed upstream output is attributed to its source without the SDK
knowing about sources. The edge's log filter reads it (``record.source``) to label and to
rate-limit per source.

:func:`pump_stderr` reads an upstream process's stderr pipe and logs each line under the logger
``mcp_reconciler.upstream.stderr`` with the source attached: labeled, redacted and rate-limited
like every other record, and JSON under ``--log-format json``, instead of raw bytes on the
gateway's own stderr."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os

import anyio

current_source: contextvars.ContextVar[str | None] = contextvars.ContextVar("mcp_reconciler_source", default=None)

stderr_log = logging.getLogger("mcp_reconciler.upstream.stderr")

#: Longer stderr lines are cut (with a marker); a line without a newline is cut at this length.
MAX_LINE_CHARS = 4096


async def pump_stderr(fd: int, source: str) -> None:
    """Log every line written to the pipe ``fd`` as the stderr of ``source``, until EOF or
    cancellation; on cancellation what is already in the pipe (a crashed upstream's last words)
    is still logged. Takes ownership of ``fd`` (closes it)."""
    token = current_source.set(source)
    os.set_blocking(fd, False)
    pending = b""
    try:
        while True:
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                break
            pending = _lines(source, pending + chunk)
    finally:
        with contextlib.suppress(OSError):
            for _ in range(64):  # bounded: at most 4 MiB more, then the rest is dropped
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                pending = _lines(source, pending + chunk)
        if pending:
            _emit(source, pending)
        current_source.reset(token)
        with contextlib.suppress(OSError):
            os.close(fd)


def _lines(source: str, data: bytes) -> bytes:
    """Emit every complete line of ``data``; return the incomplete rest (cut if too long)."""
    *lines, rest = data.split(b"\n")
    if len(rest) > MAX_LINE_CHARS:
        lines.append(rest)
        rest = b""
    for line in lines:
        _emit(source, line)
    return rest


def _emit(source: str, raw: bytes) -> None:
    text = raw.decode("utf-8", "replace").rstrip("\r")
    if len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS] + " …(cut)"
    if text:
        stderr_log.warning("upstream %s stderr: %s", source, text, extra={"source": source})
