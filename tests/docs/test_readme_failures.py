"""README "When a source fails": the broken config shown really produces the ``sources`` output
shown, byte for byte (every source fails, so no column depends on the clock), and the timeouts
example means what the text says (issue 28, ADR 0027)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import anyio
import pytest

from mcp_reconciler.api.server import serve_http
from mcp_reconciler.reconciler.config import load_config
from tests.support.readme import REPO_ROOT, block
from tests.support.waits import until

pytestmark = pytest.mark.anyio
TOKEN = "readme-operator-token"
WAIT_S = 30.0


async def test_failure_config_and_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(block("failure-config").text)
    monkeypatch.setenv("MCP_RECONCILER_OPERATOR_TOKENS", TOKEN)
    async with serve_http(cfg, port=0) as served:
        health = served.gateway.rec.health
        names = ("tickets", "files", "db", "slowpoke")
        await until(
            lambda: all(health.get(n).cause is not None for n in names),
            what="a cause for every failing source",
            timeout_s=WAIT_S,
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
        env.update(MCP_RECONCILER_URL=served.base_url, MCP_RECONCILER_TOKEN=TOKEN)
        with anyio.fail_after(WAIT_S):
            run = await anyio.run_process(
                [sys.executable, "-m", "mcp_reconciler.api.cli", "sources"], cwd=REPO_ROOT, env=env, check=False
            )
    assert run.returncode == 0, run.stderr.decode()
    assert run.stdout.decode() == block("failure-output").text


def test_source_timeouts_block(tmp_path: Path) -> None:
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(block("source-timeouts").text)
    (spec,) = load_config(cfg).specs
    assert spec.transport["timeouts"] == {"connect_s": 10.0, "call_s": 300.0, "startup_s": 90.0}
    assert spec.transport["stderr_noise"] == ("running on stdio$",)


async def test_env_settings_block(tmp_path: Path) -> None:
    """The block runs as written (its file under this test's tmp dir); check-config reads
    MCP_RECONCILER_CONFIG, and ``${GW_PORT}`` in a flow mapping is a number."""
    script = block("env-settings").text.replace("/tmp/gw-env.yaml", str(tmp_path / "gw-env.yaml"))
    script = script.replace(".venv/bin/mcp-reconciler", f"{sys.executable} -m mcp_reconciler.api.cli")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
    with anyio.fail_after(WAIT_S):
        run = await anyio.run_process(["bash", "-euc", script], cwd=REPO_ROOT, env=env, check=False)
    assert run.returncode == 0, (run.stdout.decode(), run.stderr.decode())
    loaded = load_config(tmp_path / "gw-env.yaml", environ={"GW_PORT": "8766"})
    assert loaded.settings.port == 8766


def _cli_script(name: str) -> str:
    return block(name).text.replace(".venv/bin/mcp-reconciler", f"{sys.executable} -m mcp_reconciler.api.cli")


async def test_sessions_cli_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The block, run by bash against the demo config served here: every step exits 0 and the
    session it manages ends as the block says."""
    monkeypatch.setenv("MCP_RECONCILER_OPERATOR_TOKENS", "demo-operator-token")
    async with serve_http(REPO_ROOT / "examples" / "demo" / "gateway.yaml", port=0) as served:
        assert served.gateway.rec.runtime.current_revision == 1  # the block holds revision 1
        script = _cli_script("sessions-cli").replace("http://127.0.0.1:8765", served.base_url)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
        with anyio.fail_after(60):
            run = await anyio.run_process(["bash", "-euxc", script], cwd=REPO_ROOT, env=env, check=False)
        out, err = run.stdout.decode(), run.stderr.decode()
        assert run.returncode == 0, (out, err)
        assert re.search(r"^token: \S+$", out, re.M) and "shown once" in out
        assert "revoked: clock__now" in out and "granted     1: notes__count_notes" in out, out
        sessions = served.gateway.engine.sessions.sessions()
        assert [s.owner for s in sessions] == ["owner::alice"]  # ci's session was deleted
        assert re.search(r"^hold \S+ keeps revision 1 live", out, re.M)


async def test_import_blocks(tmp_path: Path) -> None:
    script = _cli_script("import-cli").replace("/tmp/imported.yaml", str(tmp_path / "imported.yaml"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
    with anyio.fail_after(60):
        run = await anyio.run_process(["bash", "-euc", script], cwd=REPO_ROOT, env=env, check=False)
    assert run.returncode == 0, (run.stdout.decode(), run.stderr.decode())
    assert (tmp_path / "imported.yaml").read_text().startswith(block("import-output").text)


def test_source_keys_block(tmp_path: Path) -> None:
    """Every key in the annotated block loads and means what its comment says."""
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(block("source-keys").text)
    loaded = load_config(cfg)
    assert (loaded.settings.host, loaded.settings.port, loaded.settings.expose_control_tools) == (
        "127.0.0.1",
        8765,
        False,
    )
    (spec,) = loaded.specs
    t = spec.transport
    assert spec.name == "files" and spec.prefix == "fs_" and spec.uri_prefix == "files+"
    assert (t["command"], t["cwd"], dict(t["env"])) == ("npx", "/srv", {"LOG_LEVEL": "info"})
    assert t["stderr_noise"] == ("running on stdio$",)
    assert t["timeouts"] == {"connect_s": 10.0, "call_s": 300.0, "startup_s": 90.0}
    assert [dict(r) for r in t["roots"]] == [{"uri": "file:///srv/shared", "name": "shared"}]
    assert spec.watch == ("/srv/shared/**/*.md",) and spec.poll_seconds == 300
    assert spec.trust.value == "untrusted"
    assert spec.policy.overrides["read_file"].description == "Read a file under /srv/shared."
