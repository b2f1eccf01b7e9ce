"""``mcp-reconciler audit tail`` (``api/audit_cli.py``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from mcp_reconciler.api.cli import main

RECORDS = [
    {"ts": 1.0, "kind": "tools.call", "session": "s1", "name": "up__a", "outcome": "ok"},
    {"ts": 2.0, "kind": "tools.call", "session": "s2", "name": "up__b", "outcome": "error", "error": "unknown_name"},
    {"ts": 3.0, "kind": "tools.call", "session": "s1", "name": "up__b", "outcome": "ok"},
]


def _write(path: Path) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))


def test_tail_filters_by_session_and_tool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trail = tmp_path / "audit.jsonl"
    _write(trail)
    assert main(["audit", "tail", "--file", str(trail), "--session", "s1", "--json"]) == 0
    assert [json.loads(line)["ts"] for line in capsys.readouterr().out.splitlines()] == [1.0, 3.0]
    assert main(["audit", "tail", "--file", str(trail), "--tool", "up__b", "-n", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and "tools.call ok" in out[0] and "session=s1" in out[0]


def test_tail_reads_the_path_from_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "trail.jsonl")
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(json.dumps({"telemetry": {"audit": {"path": "trail.jsonl"}}}))
    assert main(["audit", "tail", "--config", str(cfg)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    cfg.write_text(json.dumps({}))
    assert main(["audit", "tail", "--config", str(cfg)]) == 1
    assert "no telemetry.audit section" in capsys.readouterr().err


@pytest.mark.anyio
async def test_tail_follow_prints_new_records(tmp_path: Path) -> None:
    trail = tmp_path / "audit.jsonl"
    _write(trail)
    argv = [sys.executable, "-m", "mcp_reconciler.api.cli", "audit", "tail", "--file", str(trail), "-f", "--json"]
    async with await anyio.open_process(argv) as process:
        assert process.stdout is not None
        seen = b""
        try:
            with anyio.fail_after(20):
                while seen.count(b"\n") < 3:
                    seen += await process.stdout.receive()
                with trail.open("a") as f:
                    f.write(json.dumps({"ts": 4.0, "kind": "session.delete", "outcome": "ok"}) + "\n")
                while seen.count(b"\n") < 4:
                    seen += await process.stdout.receive()
        finally:
            process.terminate()
    assert json.loads(seen.splitlines()[3])["kind"] == "session.delete"


def test_metrics_listen_off_loopback_is_refused_unless_public(tmp_path: Path) -> None:
    from mcp_reconciler.reconciler.config import check_config

    cfg = tmp_path / "gateway.yaml"
    cfg.write_text("sources: []\ntelemetry:\n  metrics_listen: 0.0.0.0:9464\n")
    problems = check_config(cfg, environ={})
    assert len(problems) == 1
    text = str(problems[0])
    assert "gateway.yaml:3" in text and "telemetry" in text and "metrics_listen_public" in text
    cfg.write_text("sources: []\ntelemetry:\n  metrics_listen: 0.0.0.0:9464\n  metrics_listen_public: true\n")
    assert check_config(cfg, environ={}) == []
    cfg.write_text("sources: []\ntelemetry:\n  metrics_listen: '[::1]:9464'\n")
    assert check_config(cfg, environ={}) == []
