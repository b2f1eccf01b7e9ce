"""The engine on a config file with real stdio upstreams (the bundled example servers):
watched inputs respawn a snapshot server, invalid config edits keep the last good config."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import anyio
import mcp_types as types
import pytest

from mcp_reconciler.reconciler.gateway import Gateway
from mcp_reconciler.reconciler.upstream import UpstreamConnection
from tests.support.waits import until

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parents[2]
WAIT = 30.0


def write_config(d: Path, extra: str = "") -> Path:
    cfg = d / "gateway.yaml"
    cfg.write_text(
        "sources:\n"
        "  - name: notes\n"
        f"    stdio: {{command: python, args: [{REPO / 'examples/upstreams/notes_server.py'}, --data, data]}}\n"
        "    watch: ['data/**/*.yml']\n" + extra
    )
    return cfg


async def count_notes(gw: Gateway) -> tuple[int, int, int]:
    live = gw.rec.runtime.current
    assert live is not None
    conn = live.generation.source_state("notes").connection  # type: ignore[union-attr]
    assert isinstance(conn, UpstreamConnection)
    async with live.operation():
        res = await conn.send(
            types.CallToolRequest(params=types.CallToolRequestParams(name="count_notes")), types.CallToolResult
        )
    body = json.loads(res.content[0].text)  # type: ignore[union-attr]
    return live.revision, body["notes"], body["pid"]


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


async def wait_revision_above(gw: Gateway, revision: int) -> None:
    with anyio.fail_after(WAIT):
        while (gw.rec.runtime.current_revision or 0) <= revision:
            await gw.engine.refresh(timeout_s=WAIT)


async def test_I11_watched_input_change_respawns_snapshot_server(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.yml").write_text("title: a\n")
    cfg = write_config(tmp_path)
    async with Gateway(cfg, watch_interval_s=0.05) as gw:
        rev1, n1, pid1 = await count_notes(gw)
        assert n1 == 1
        # A new file matching the watched glob: the spawn-snapshot server must be respawned.
        (tmp_path / "data" / "b.yml").write_text("title: b\n")
        # Other revisions may publish meanwhile (a file written within the mtime-granularity
        # window is re-checked once); wait for the one that serves the new data.
        with anyio.fail_after(WAIT):
            while (await count_notes(gw))[1] != 2:
                await gw.engine.refresh(timeout_s=WAIT)
        rev2, n2, pid2 = await count_notes(gw)
        assert rev2 > rev1 and pid2 != pid1 and n2 == 2
        await until(
            lambda: not pid_alive(pid1),
            what="the old process is gone once its generation drained",
            timeout_s=WAIT,
        )
        st = await gw.engine.status()
        assert st.state == "ready" and st.tracked_files >= 3
        # Deleting every watched file is a warning, never a silent zero.
        for f in (tmp_path / "data").iterdir():
            f.unlink()
        await wait_revision_above(gw, rev2)
        st = await gw.engine.status()
        assert any("matched no files" in w for w in st.warnings)
    assert not pid_alive(pid2)


async def test_I11_invalid_config_edit_keeps_last_good_and_fix_recovers(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.yml").write_text("title: a\n")
    cfg = write_config(tmp_path)
    async with Gateway(cfg, watch_interval_s=0.05) as gw:
        rev1, _, _ = await count_notes(gw)
        good = cfg.read_text()
        cfg.write_text(good + "  - name: broken\n    stdio: {args: []}\n")
        with anyio.fail_after(WAIT):
            while (await gw.engine.status()).config_error is None:
                await gw.engine.refresh(timeout_s=WAIT)
        st = await gw.engine.status()
        assert st.state == "error"
        assert "gateway.yaml:" in st.config_error and "sources[1]" in st.config_error
        assert st.revision == rev1 and [s.name for s in st.sources] == ["notes"]
        assert (await count_notes(gw))[1] == 1  # still serving the last good config
        clock = f"    stdio: {{command: python, args: [{REPO / 'examples/upstreams/clock_server.py'}]}}\n"
        cfg.write_text(good + "  - name: clock\n" + clock)
        with anyio.fail_after(WAIT):
            while "clock__now" not in gw.rec.runtime.current.generation.tools:  # type: ignore[union-attr]
                await gw.engine.refresh(timeout_s=WAIT)
        st = await gw.engine.status()
        assert st.config_error is None and st.state == "ready"


def test_check_config_cli_reports_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mcp_reconciler.api.cli import main

    cfg = write_config(tmp_path)
    assert main(["check-config", str(cfg)]) == 0
    cfg.write_text(cfg.read_text() + "  - name: bad\n    http: {}\n")
    assert main(["check-config", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "gateway.yaml:" in err and "sources[1]" in err


@pytest.mark.skipif(shutil.which("true") is None, reason="needs coreutils")
def test_bundled_demo_config_is_valid() -> None:
    from mcp_reconciler.api.check_config import run

    assert run(os.fspath(REPO / "examples/demo/gateway.yaml")) == 0


def test_serve_on_an_invalid_config_exits_1_with_file_and_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    cfg = tmp_path / "gateway.yaml"
    cfg.write_text("sources:\n  - name: x\n    http: {}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "mcp_reconciler.api.cli", "serve", "--config", str(cfg), "--port", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "gateway.yaml:3: sources[0].http.url" in proc.stderr
    assert "Traceback" not in proc.stderr
