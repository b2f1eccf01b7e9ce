"""The audit trail: one JSON line per operation and per decision, never in a call's way (I23).

Recording a decision is one call, from anywhere in the process::

    from mcp_reconciler.reconciler import audit

    audit.record("ratelimit.refused", principal=binding.principal, session=session.id,
                 name="github__create_issue", outcome="refused", error="rate_limited")

:func:`record` takes a ``kind`` (dotted, ``<what>.<verb>``: ``tools.call``, ``session.create``,
``credential.refused``) and any of the fields in :data:`FIELDS` (others are refused with a
``TypeError`` at the call site, so the record format stays the documented one; call it from the
event loop's thread, where the queue bound is exact). It returns at once: the record joins a
bounded queue (``telemetry.audit.queue``) that one writer thread drains to the sink; when the
queue is full the record is dropped and counted (``dropped``), and a sink that fails (a full
disk) counts its records as ``failed`` and keeps going. Nothing here ever blocks or awaits
(I23). Without an installed :class:`AuditLog` (``telemetry.audit`` absent) :func:`record` does
nothing.

Every free-text field is redacted (``reconciler/redaction.py``: bearer tokens, ``token=`` pairs and
every ``${VAR}`` value the config interpolated) by the writer thread before it is written, off
the call path. Arguments and results are never recorded; :func:`argument_digest` gives the
opt-in SHA-256 of the arguments (``telemetry.audit.argument_digest``).

Sinks: :class:`FileSink` (JSON lines, rotated by size: ``<path>.1`` … ``<path>.<keep>``) or
:class:`StreamSink` (stderr). In a cluster each replica writes its own file and every record
carries ``replica``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, Protocol

from opentelemetry.metrics import CallbackOptions, Observation

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.redaction import redact_text

#: The fields a record may carry besides ``ts``, ``kind`` and ``replica`` (README "Observe it").
FIELDS = frozenset(
    {
        "principal",  # role-qualified: session::<id>, owner::alice, operator::operator1, anonymous::
        "session",
        "view",
        "source",
        "name",  # the served (exposed) name, or the URI read
        "upstream_name",
        "revision",
        "digest",  # the definition digest of the entry that served
        "outcome",  # ok, or what refused/failed it
        "error",  # the stable client error code (I12)
        "duration_ms",
        "request_bytes",
        "response_bytes",
        "args_sha256",
        "reason",
        "detail",
        "status",  # the HTTP status of a control-API request
        "target",  # what a decision was about (a hold id, a session id)
    }
)


def _observe_records(_options: CallbackOptions) -> Iterable[Observation]:
    log = _current
    if log is None:
        return []
    return [
        Observation(log.written, {"outcome": "written"}),
        Observation(log.dropped, {"outcome": "dropped"}),
        Observation(log.failed, {"outcome": "failed"}),
    ]


# Read from the log's own counts at collection: nothing on the call path or the writer's.
telemetry.meter.create_observable_counter(
    "audit.records",
    callbacks=[_observe_records],
    description="Audit records by outcome: written, dropped (queue full), failed (the sink refused: a full disk)",
)


class Sink(Protocol):
    """Where the writer thread puts lines; it may block (a slow disk) and may raise ``OSError``."""

    def write(self, line: str) -> None:
        """Append one or more whole lines (each ending in a newline)."""

    def close(self) -> None:
        """Flush and release."""


class StreamSink:
    """Lines to a text stream (stderr by default), flushed per batch."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr

    def write(self, line: str) -> None:
        """Write ``line`` and flush."""
        self._stream.write(line)
        self._stream.flush()

    def close(self) -> None:
        """Flush (the stream is not ours to close)."""
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()


class FileSink:
    """JSON lines appended to ``path``; when the next line would take the file past
    ``max_bytes`` it is renamed to ``<path>.1`` (``.1`` to ``.2``, …) and a new file started;
    at most ``keep`` rotated files are kept."""

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int, keep: int) -> None:
        self.path = Path(path)
        self._max = max_bytes
        self._keep = keep
        self._file: IO[bytes] | None = None
        self._size = 0

    def _open(self) -> IO[bytes]:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - held open across writes
            self._size = self._file.tell()
        return self._file

    def write(self, line: str) -> None:
        """Append ``line``, rotating first when it would not fit."""
        data = line.encode()
        f = self._open()
        if self._size and self._size + len(data) > self._max:
            self._rotate()
            f = self._open()
        f.write(data)
        self._size += len(data)

    def _rotate(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._keep <= 0:
            self.path.unlink(missing_ok=True)
            return
        Path(f"{self.path}.{self._keep}").unlink(missing_ok=True)
        for i in range(self._keep - 1, 0, -1):
            older = Path(f"{self.path}.{i}")
            if older.exists():
                older.replace(f"{self.path}.{i + 1}")
        if self.path.exists():
            self.path.replace(f"{self.path}.1")

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


#: The writer's cadence: it wakes this often (or at once when half the queue is used, or for
#: :meth:`AuditLog.drained` and :meth:`AuditLog.close`) and writes everything waiting in one
#: write. A record never wakes a thread: at one record per call, per-record wake-ups cost more
#: CPU than the record itself (measured, ADR 0031).
FLUSH_S = 0.25


class AuditLog:
    """A bounded queue of records and the one thread that writes them (module docstring).

    ``written``, ``dropped`` (queue full) and ``failed`` (the sink raised) are counters read by
    ``/v1/status``; ``queued`` is the queue's depth now. ``argument_digest``: records may carry
    ``args_sha256`` (:func:`argument_digest` answers ``None`` otherwise)."""

    def __init__(
        self, sink: Sink, *, queue_max: int = 10_000, replica: str | None = None, argument_digest: bool = False
    ) -> None:
        self.sink = sink
        self.replica = replica
        self.argument_digest = argument_digest
        # A deque bounded by two counts, each written by one side only (records are made on the
        # event loop, taken by the writer): an append is the whole cost of a record.
        self._queue: deque[dict[str, Any]] = deque()
        self._put = 0
        self._taken = 0  # taken by the writer (no longer waiting)
        self._done = 0  # handed to the sink (written or failed)
        self.queue_max = queue_max
        self.written = 0
        self.dropped = 0
        self.failed = 0
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._stopping = False
        self._idle = threading.Condition()

    @property
    def queued(self) -> int:
        """Records waiting for the writer right now."""
        return self._put - self._taken

    def record(self, kind: str, fields: Mapping[str, Any]) -> None:
        """Queue one record (never blocks, never wakes a thread; a full queue counts a drop)."""
        unknown = fields.keys() - FIELDS
        if unknown:
            raise TypeError(f"audit.record: unknown field(s) {sorted(unknown)}")
        waiting = self._put - self._taken
        if waiting >= self.queue_max:
            self.dropped += 1  # full: the record is dropped, the caller never waits (I23)
            return
        out: dict[str, Any] = {"ts": round(time.time(), 6), "kind": kind}
        if self.replica is not None:
            out["replica"] = self.replica
        out.update(fields)  # redacted and serialized by the writer thread, off the call path
        self._put += 1
        self._queue.append(out)
        if waiting * 2 >= self.queue_max and not self._wake.is_set():
            self._wake.set()  # filling up: write now rather than at the next tick

    def status(self) -> dict[str, int]:
        """The counters ``/v1/status`` shows under ``audit``."""
        return {
            "written": self.written,
            "dropped": self.dropped,
            "failed": self.failed,
            "queued": self.queued,
            "queue_max": self.queue_max,
        }

    def start(self) -> None:
        """Start the writer thread (a daemon: an exit never waits on a stuck disk)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="mcp-reconciler-audit", daemon=True)
            self._thread.start()

    def close(self, timeout_s: float = 2.0) -> None:
        """Write what is queued (for up to ``timeout_s``), stop the writer, close the sink."""
        thread = self._thread
        if thread is None:
            self.sink.close()
            return
        self._thread = None
        self._stopping = True
        self._wake.set()
        thread.join(timeout_s)  # a writer stuck on the sink is left behind (a daemon thread)

    def drained(self, timeout_s: float) -> bool:
        """Wait until every queued record has been handed to the sink (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        self._wake.set()
        with self._idle:
            while self._put != self._done:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def _run(self) -> None:
        while True:
            self._wake.wait(FLUSH_S)
            self._wake.clear()
            stopping = self._stopping
            items: list[dict[str, Any]] = []
            while self._queue:
                items.append(self._queue.popleft())
            self._taken += len(items)
            try:
                if items:
                    self.sink.write("".join(_line(item) for item in items))
                    self.written += len(items)
            except (OSError, ValueError):
                self.failed += len(items)
            finally:
                self._done += len(items)
                if self._done == self._put:  # idle: wake whoever waits in drained()
                    with self._idle:
                        self._idle.notify_all()
            if stopping and not self._queue:
                self.sink.close()
                return


#: Fields whose values the gateway makes itself (ids, codes, digests, numbers): not redacted.
_OWN = frozenset(
    {
        "ts",
        "kind",
        "replica",
        "principal",
        "session",
        "view",
        "source",
        "revision",
        "digest",
        "outcome",
        "error",
        "duration_ms",
        "request_bytes",
        "response_bytes",
        "args_sha256",
        "status",
    }
)


def _line(item: Mapping[str, Any]) -> str:
    """One record as a JSON line: ``None`` fields left out, every other string redacted."""
    out = {k: redact_text(v) if isinstance(v, str) and k not in _OWN else v for k, v in item.items() if v is not None}
    return json.dumps(out, separators=(",", ":"), default=str) + "\n"


_current: AuditLog | None = None


def current() -> AuditLog | None:
    """The installed audit log, if any."""
    return _current


@contextlib.contextmanager
def installed(log: AuditLog) -> Iterator[AuditLog]:
    """Make ``log`` the one :func:`record` writes to while the block runs (its writer started,
    and closed after); the previous one (usually none) comes back after."""
    global _current
    previous, _current = _current, log
    log.start()
    try:
        yield log
    finally:
        _current = previous
        log.close()


def record(kind: str, **fields: Any) -> None:
    """Record one operation or decision (module docstring); a no-op while no log is installed."""
    log = _current
    if log is not None:
        log.record(kind, fields)


def enabled() -> bool:
    """Whether records are being written (skip computing sizes and digests otherwise)."""
    return _current is not None


def argument_digest(arguments: Any) -> str | None:
    """``sha256:<hex>`` of ``arguments`` as canonical JSON when the installed log asks for
    argument digests, else ``None`` (the arguments themselves are never recorded)."""
    log = _current
    if log is None or not log.argument_digest or arguments is None:
        return None
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def open_sink(path: str, *, base: Path | None = None, max_bytes: int, keep: int) -> Sink:
    """The sink a ``telemetry.audit.path`` names: ``stderr``, or a file (relative to ``base``)."""
    if path == "stderr":
        return StreamSink()
    target = Path(path)
    if not target.is_absolute() and base is not None:
        target = base / target
    return FileSink(target, max_bytes=max_bytes, keep=keep)
