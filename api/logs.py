"""Operator logging: plain text or one JSON object per line, always redacted, always bounded.

Every record passes three filters on the way to the one handler ``configure`` installs:

1. **Source.** ``record.source`` is the upstream source the record is about: set explicitly
   (``extra={"source": ...}``) or inherited from the task that logged it
   (``reconciler.logsource.current_source``: an upstream connection's tasks, including the
   SDK's own reader and writer tasks, carry their source). Text logs show it as ``[source]``,
   JSON as a field.
2. **Rate limit** (:class:`RateLimitFilter`). Records that repeat -- same source, logger, level
   and message template -- pass at most ``burst`` times per ``window_s``; the rest are counted,
   and the count rides on the next record of that kind that passes (``record.suppressed``,
   "[N similar suppressed]") or is written when logging shuts down. An upstream writing garbage
   to stdout used to produce one traceback per line (244,169 in 125 s); now it costs a few
   records per window.
3. **Redaction** (:class:`RedactingFilter`). Message, arguments and traceback are rendered, then
   bearer tokens, ``Authorization`` values and ``token=``-style pairs are masked by pattern, and
   every ``${VAR}`` value the config interpolated is masked by value
   (``reconciler.redaction.SECRETS``), raw or URL-encoded, whoever logged it.

Libraries that log one line per request at INFO (httpx2's "HTTP Request: ...", the SDK's
per-session lines) are held at WARNING unless the level is DEBUG: a busy gateway must not write
a line per protocol message."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections import OrderedDict
from typing import Any, TextIO

from mcp_reconciler.reconciler.logsource import current_source
from mcp_reconciler.reconciler.redaction import redact_text

#: Loggers that speak once per request or session at INFO: held at WARNING unless DEBUG.
CHATTY_LOGGERS = (
    "httpx2",
    "httpx",
    "httpcore2",
    "httpcore",
    "mcp.server.streamable_http",
    "mcp.server.streamable_http_manager",
    "mcp.server.lowlevel.server",
    "mcp.client.streamable_http",
)


def redact(text: str) -> str:
    """``text`` with secrets masked: by pattern, then every registered secret value."""
    return redact_text(text)


class SourceFilter(logging.Filter):
    """Attach ``record.source`` from the logging task's context unless the call site set it."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Set ``record.source`` from the logging task's context unless set; never drops a record."""
        if getattr(record, "source", None) is None:
            record.source = current_source.get()
        return True


class RateLimitFilter(logging.Filter):
    """At most ``burst`` records per key per ``window_s`` (key: source, logger, level, message
    template); suppressed records are counted and reported (see the module docstring). At most
    ``max_keys`` keys are tracked (least recently seen forgotten first), so message templates
    built with f-strings cannot grow it without bound."""

    def __init__(self, *, burst: int = 5, window_s: float = 10.0, max_keys: int = 1024) -> None:
        super().__init__()
        self.burst = burst
        self.window_s = window_s
        self.max_keys = max_keys
        self._lock = threading.Lock()
        # key -> [window start, passed in window, suppressed since the last report, a sample record]
        self._keys: OrderedDict[tuple[Any, ...], list[Any]] = OrderedDict()
        self.suppressed_total = 0

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether the record passes the rate limit; a passing record carries the count suppressed before
        it (``record.suppressed``). Thread-safe."""
        key = (getattr(record, "source", None), record.name, record.levelno, str(record.msg))
        now = time.monotonic()
        with self._lock:
            state = self._keys.get(key)
            if state is None:
                state = self._keys[key] = [now, 0, 0, record]
                while len(self._keys) > self.max_keys:
                    self._keys.popitem(last=False)
            else:
                self._keys.move_to_end(key)
            if now - state[0] >= self.window_s:
                state[0], state[1] = now, 0
            if state[1] >= self.burst:
                state[2] += 1
                self.suppressed_total += 1
                return False
            state[1] += 1
            if state[2]:
                record.suppressed = state[2]
                state[2] = 0
            return True

    def pending(self) -> list[tuple[logging.LogRecord, int]]:
        """(sample record, count) for every key with suppressed records not yet reported;
        resets those counts."""
        with self._lock:
            out = [(state[3], state[2]) for state in self._keys.values() if state[2]]
            for state in self._keys.values():
                state[2] = 0
        return out


class RedactingFilter(logging.Filter):
    """Render message, arguments and traceback, then mask secrets (see :func:`redact`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Render the record's message, arguments and traceback into redacted text in place; never drops it."""
        message = record.getMessage()
        redacted = redact(message)
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        record.msg, record.args = redacted, None
        return True


def _suffix(record: logging.LogRecord) -> str:
    count = getattr(record, "suppressed", None)
    return f" [{count} similar suppressed]" if count else ""


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, time, level, logger, message, and when present
    ``source``, ``suppressed`` and ``exception``."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON (non-ASCII kept as is)."""
        out: dict[str, Any] = {
            "ts": round(record.created, 6),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        source = getattr(record, "source", None)
        if source is not None:
            out["source"] = source
        suppressed = getattr(record, "suppressed", None)
        if suppressed:
            out["suppressed"] = suppressed
        if record.exc_text:
            out["exception"] = record.exc_text
        return json.dumps(out, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger [source] message [N similar suppressed]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(where)s %(message)s%(also)s")

    def format(self, record: logging.LogRecord) -> str:
        """The record as text, with ``[source]`` and the suppressed count when present."""
        source = getattr(record, "source", None)
        record.where = f" [{source}]" if source is not None else ""
        record.also = _suffix(record)
        return super().format(record)


class GatewayHandler(logging.StreamHandler[TextIO]):
    """The one handler: source, rate limit and redaction filters, in that order; on close, the
    counts still pending are written as one record each."""

    def __init__(self, stream: TextIO, fmt: str, limiter: RateLimitFilter | None = None) -> None:
        super().__init__(stream)
        self.limiter = limiter or RateLimitFilter()
        self.addFilter(SourceFilter())
        self.addFilter(self.limiter)
        self.addFilter(RedactingFilter())
        self.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
        self.set_name("mcp-reconciler")

    def report_suppressed(self) -> None:
        """Write one record per kind whose suppressed count was not reported yet."""
        for sample, count in self.limiter.pending():
            record = logging.LogRecord(
                sample.name, sample.levelno, sample.pathname, sample.lineno, "%s", (redact(sample.getMessage()),), None
            )
            record.source = getattr(sample, "source", None)
            record.suppressed = count
            record.msg, record.args = f"(last of a suppressed run) {record.getMessage()}", None
            if self.formatter is not None:
                try:
                    self.stream.write(self.formatter.format(record) + self.terminator)
                    self.flush()
                except (OSError, ValueError):
                    return

    def close(self) -> None:
        """Write the suppressed counts still pending, then close the stream handler."""
        self.report_suppressed()
        super().close()


def configure(level: str = "WARNING", fmt: str = "text", stream: TextIO | None = None) -> GatewayHandler:
    """Configure the root logger on stderr (stdout may carry the MCP protocol); returns the
    handler (``stream`` replaces stderr, for tests)."""
    handler = GatewayHandler(stream if stream is not None else sys.stderr, fmt)
    root = logging.getLogger()
    # Replace only our own handler (configure may run twice in one process, e.g. in tests).
    for old in [h for h in root.handlers if h.get_name() == "mcp-reconciler"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    quiet = logging.getLevelName(level.upper()) != logging.DEBUG
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING if quiet else logging.NOTSET)
    return handler
