"""Secret values, known by value: every ``${VAR}`` value the config interpolated (issue 10, item 11).

Pattern redaction (bearer tokens, ``token=`` pairs) cannot know that ``/nonexistent/SUPERSECRET``
in a ``FileNotFoundError`` or ``/sse/SUPERSECRET`` in an ``HTTPStatusError`` is a secret: it
came from ``${VAR}`` in a stdio command or a URL. The config loader therefore hands every value
it substituted to :data:`SECRETS`, and the log system replaces each occurrence -- raw or
URL-encoded -- wherever it lands, whatever the call site or library that logged it.

Values are only ever added (a rotated secret stays a secret in what is still being logged);
the registry is bounded (:data:`MAX_VALUES`, oldest forgotten first). Values shorter than
:data:`MIN_CHARS` are not registered: redacting every ``1`` or ``80`` in the log would hide more
than it protects. Thread-safe: the config is read in a worker thread."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from urllib.parse import quote

MIN_CHARS = 4
MAX_VALUES = 4096
MASK = "[REDACTED]"


class SecretValues:
    """A bounded set of secret values and one compiled pattern that finds any of them."""

    def __init__(self) -> None:
        self._values: dict[str, None] = {}  # insertion-ordered: the oldest is forgotten first
        self._pattern: re.Pattern[str] | None = None
        self._lock = threading.Lock()

    def add(self, values: Iterable[str]) -> None:
        """Register ``values`` (and their URL-encoded forms) as secrets."""
        fresh = []
        for value in values:
            for form in {value, quote(value, safe=""), quote(value)}:
                if len(form) >= MIN_CHARS and form not in self._values:
                    fresh.append(form)
        if not fresh:
            return
        with self._lock:
            for form in fresh:
                self._values[form] = None
            while len(self._values) > MAX_VALUES:
                del self._values[next(iter(self._values))]
            ordered = sorted(self._values, key=len, reverse=True)  # the longest match wins
            self._pattern = re.compile("|".join(re.escape(v) for v in ordered))

    def redact(self, text: str) -> str:
        """``text`` with every registered value replaced by :data:`MASK`."""
        pattern = self._pattern
        return text if pattern is None else pattern.sub(MASK, text)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, value: object) -> bool:
        return value in self._values


#: The process-wide registry the config loader fills and the log system reads.
SECRETS = SecretValues()


#: Secrets recognisable by shape wherever they appear (a log line, an upstream's stderr).
PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"),
    re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)(?!bearer\s)[^\s,\"'}]+"),
    re.compile(r"(?i)((?:token|secret|password|api[_-]?key)[\"']?\s*[:=]\s*[\"']?)[^\s,\"'}&]+"),
)


def redact_text(text: str) -> str:
    """``text`` with secrets masked: by pattern (:data:`PATTERNS`), then every registered value
    (:data:`SECRETS`). The log system and failure causes (``reconciler/failure_cause.py``) both
    use it, so what an operator sees anywhere is redacted alike."""
    for pattern in PATTERNS:
        text = pattern.sub(r"\1" + MASK, text)
    return SECRETS.redact(text)
