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
gateway's own stderr. Lines are logged at INFO (an upstream's banner is not a warning of the
gateway's), DEBUG for those matching the source's ``stderr_noise`` patterns."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from mcp_reconciler.reconciler.failure_cause import Evidence

current_source: contextvars.ContextVar[str | None] = contextvars.ContextVar("mcp_reconciler_source", default=None)

stderr_log = logging.getLogger("mcp_reconciler.upstream.stderr")

#: Longer stderr lines are cut (with a marker); a line without a newline is cut at this length.
MAX_LINE_CHARS = 4096


class StderrSink:
    """Where one connection's stderr lines go: the log at INFO — DEBUG for a line matching one
    of the source's ``stderr_noise`` patterns (banners an operator marked as noise) — and the
    connection's failure :class:`~reconciler.failure_cause.Evidence` (its last lines)."""

    def __init__(self, source: str, evidence: Evidence | None = None, noise: Sequence[str] = ()) -> None:
        self.source = source
        self.evidence = evidence
        # Validated by the config loader; a pattern that still fails to compile is skipped.
        self.noise = tuple(_compiled(noise))

    def line(self, text: str) -> None:
        """Handle one complete stderr line (already decoded and cut)."""
        if self.evidence is not None:
            self.evidence.stderr_line(text)
        level = logging.DEBUG if any(p.search(text) for p in self.noise) else logging.INFO
        stderr_log.log(level, "upstream %s stderr: %s", self.source, text, extra={"source": self.source})


def _compiled(patterns: Sequence[str]) -> list[re.Pattern[str]]:
    out = []
    for pattern in patterns:
        try:
            out.append(re.compile(pattern))
        except re.error:
            continue
    return out


async def pump_stderr(fd: int, source: str | StderrSink) -> None:
    """Log every line written to the pipe ``fd`` as the stderr of ``source`` (a name, or a
    :class:`StderrSink` that also feeds failure evidence), until EOF or cancellation; on
    cancellation what is already in the pipe (a crashed upstream's last words) is still
    logged. Takes ownership of ``fd`` (closes it)."""
    sink = source if isinstance(source, StderrSink) else StderrSink(source)
    token = current_source.set(sink.source)
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
            pending = _lines(sink, pending + chunk)
    finally:
        with contextlib.suppress(OSError):
            for _ in range(64):  # bounded: at most 4 MiB more, then the rest is dropped
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                pending = _lines(sink, pending + chunk)
        if pending:
            _emit(sink, pending)
        current_source.reset(token)
        with contextlib.suppress(OSError):
            os.close(fd)


def _lines(sink: StderrSink, data: bytes) -> bytes:
    """Emit every complete line of ``data``; return the incomplete rest (cut if too long)."""
    *lines, rest = data.split(b"\n")
    if len(rest) > MAX_LINE_CHARS:
        lines.append(rest)
        rest = b""
    for line in lines:
        _emit(sink, line)
    return rest


def _emit(sink: StderrSink, raw: bytes) -> None:
    text = raw.decode("utf-8", "replace").rstrip("\r")
    if len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS] + " …(cut)"
    if text:
        sink.line(text)
