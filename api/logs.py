"""Operator logging: plain text or one JSON object per line, always with secrets redacted.

Redaction is a filter on every record (message and arguments rendered first), so a bearer
token, an ``Authorization`` header or a ``token=...`` pair never reaches the log, whatever
the call site passed."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any

_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"),
    re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)(?!bearer\s)[^\s,\"'}]+"),
    re.compile(r"(?i)((?:token|secret|password|api[_-]?key)[\"']?\s*[:=]\s*[\"']?)[^\s,\"'}&]+"),
)


def redact(text: str) -> str:
    for pattern in _PATTERNS:
        text = pattern.sub(r"\1[REDACTED]", text)
    return text


class RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact(message)
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        record.msg, record.args = redacted, None
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 6),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_text:
            out["exception"] = record.exc_text
        return json.dumps(out, ensure_ascii=False)


def configure(level: str = "WARNING", fmt: str = "text") -> None:
    """Configure the root logger on stderr (stdout may carry the MCP protocol)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RedactingFilter())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    handler.set_name("mcp-reconciler")
    root = logging.getLogger()
    # Replace only our own handler (configure may run twice in one process, e.g. in tests).
    root.handlers[:] = [h for h in root.handlers if h.get_name() != "mcp-reconciler"] + [handler]
    root.setLevel(level.upper())
