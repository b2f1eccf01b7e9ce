"""The audit trail's queue, writer and sinks (``reconciler/audit.py``, ADR 0031, I23)."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import pytest

from mcp_reconciler.reconciler import audit
from mcp_reconciler.reconciler.redaction import SECRETS

WAIT = 10.0


class StuckSink:
    """A sink whose writes wait until released (a slow disk, an NFS mount that hangs)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.lines: list[str] = []

    def write(self, line: str) -> None:
        self.entered.set()
        assert self.release.wait(WAIT)
        self.lines.append(line)

    def close(self) -> None:
        """Nothing to release."""


def test_I23_a_stuck_sink_never_blocks_a_record() -> None:
    """With the writer stuck on its first record, the queue takes exactly ``queue_max`` more
    (N) and the next one (N + 1) is dropped and counted; ``record`` never waits."""
    sink = StuckSink()
    log = audit.AuditLog(sink, queue_max=16)
    # A watchdog: a ``record`` that waited for room would be let through by it, and then find no
    # drop counted (the test fails instead of hanging).
    watchdog = threading.Timer(WAIT / 2, sink.release.set)
    watchdog.start()
    with audit.installed(log):
        audit.record("tools.call", name="first")
        assert sink.entered.wait(WAIT)  # the writer holds the first record, stuck
        for i in range(16):
            audit.record("tools.call", name=f"n{i}")
        assert (log.queued, log.dropped) == (16, 0)  # N: all queued
        audit.record("tools.call", name="over")
        assert (log.queued, log.dropped) == (16, 1)  # N + 1: dropped, counted
        for _ in range(100):
            audit.record("tools.call")
        assert log.dropped == 101
        sink.release.set()
        assert log.drained(WAIT)
    watchdog.cancel()
    assert log.written == 17 and log.status()["dropped"] == 101
    assert [json.loads(line)["name"] for line in "".join(sink.lines).splitlines()][:2] == ["first", "n0"]


def test_I23_a_failing_sink_counts_failures_and_keeps_writing(tmp_path: Path) -> None:
    """``/dev/full``: every write fails with ENOSPC; each is counted, none raises anywhere."""
    log = audit.AuditLog(audit.FileSink("/dev/full", max_bytes=1 << 20, keep=1), queue_max=10_000)
    with audit.installed(log):
        for _ in range(500):
            audit.record("tools.call", outcome="ok")
        assert log.drained(WAIT)
    assert log.failed + log.dropped == 500 and log.written == 0 and log.failed > 0


def test_records_are_redacted_and_carry_the_replica() -> None:
    SECRETS.add(["interpolated-secret-value-42"])
    out = io.StringIO()
    log = audit.AuditLog(audit.StreamSink(out), replica="r1")
    with audit.installed(log):
        audit.record("credential.refused", detail="Bearer abc.def.ghi and interpolated-secret-value-42")
        assert log.drained(WAIT)
    record = json.loads(out.getvalue())
    assert record["replica"] == "r1" and record["kind"] == "credential.refused"
    assert "abc.def.ghi" not in out.getvalue() and "interpolated-secret-value-42" not in out.getvalue()


def test_unknown_fields_are_refused_and_nothing_is_recorded_without_a_log() -> None:
    audit.record("tools.call", whatever=1)  # no log installed: a no-op
    log = audit.AuditLog(audit.StreamSink(io.StringIO()))
    with audit.installed(log), pytest.raises(TypeError, match="whatever"):
        audit.record("tools.call", whatever=1)


def test_argument_digest_only_when_asked() -> None:
    assert audit.argument_digest({"a": 1}) is None
    with audit.installed(audit.AuditLog(audit.StreamSink(io.StringIO()), argument_digest=True)):
        one = audit.argument_digest({"a": 1, "b": 2})
        assert one == audit.argument_digest({"b": 2, "a": 1})  # canonical JSON
        assert one is not None and one.startswith("sha256:") and one != audit.argument_digest({"a": 2})


def test_file_sink_rotates_by_size_and_keeps_the_count(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = audit.FileSink(path, max_bytes=100, keep=2)
    for i in range(10):
        sink.write(f'{{"n":{i},"pad":"{"x" * 30}"}}\n')  # 41 bytes: two per file
    sink.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    newest = [json.loads(line)["n"] for line in path.read_text().splitlines()]
    assert newest == [8, 9]
    assert [json.loads(line)["n"] for line in Path(f"{path}.2").read_text().splitlines()] == [4, 5]
