"""deploy/systemd/mcp-reconciler.service: ``systemd-analyze verify`` accepts it without a single
warning (where systemd is installed; skipped with the reason where not), it carries the hardening
README "Deploy" promises, and its ExecStart and ExecReload do what the unit's comments say on a
real gateway: ExecStart's command line serves, ExecReload's SIGHUP reloads the config, the
KillSignal stops it with exit 0 within TimeoutStopSec. (No systemd runs as PID 1 on the test
machines, so the unit itself is not started.)"""

from __future__ import annotations

import configparser
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_reconciler.reconciler.config import GatewaySettings
from tests.deploy.tools import require
from tests.support.gateway_process import gateway_process, stop
from tests.support.readme import REPO_ROOT, block

pytestmark = pytest.mark.anyio

UNIT = REPO_ROOT / "deploy" / "systemd" / "mcp-reconciler.service"
INSTALLED = "/opt/mcp-reconciler/bin/"
CONFIG = "/etc/mcp-reconciler/gateway.yaml"
BIN = Path(sys.executable).parent


def service() -> dict[str, list[str]]:
    """The [Service] section: every key with all its values (systemd keys may repeat)."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = require("systemd-analyze", "systemd", in_ci=False)
    # The one substitution: ExecStart's venv is this suite's (verify checks that it is executable).
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace(INSTALLED, f"{BIN}/"))
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=120, check=False)
    # verify exits 0 on lines it ignores: a warning is a failure here.
    assert (proc.returncode, proc.stderr, proc.stdout) == (0, "", ""), proc.stderr
    broken = tmp_path / "broken" / UNIT.name
    broken.parent.mkdir()
    broken.write_text(unit.read_text().replace("ProtectSystem=strict", "ProtectSystem=stricter"))
    proc = subprocess.run([analyze, "verify", str(broken)], capture_output=True, text=True, timeout=120, check=False)
    assert "ProtectSystem" in proc.stderr or "protect system" in proc.stderr, "verify must notice a bad value"


def test_unit_settings() -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    assert parser["Install"]["WantedBy"] == "multi-user.target"
    svc = {key: values[-1] for key, values in service().items()}
    assert svc["Type"] == "simple"  # no sd_notify in the gateway
    assert svc["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert svc["KillSignal"] == "SIGTERM"
    # The gateway's default grace (the unit's config may not raise it past TimeoutStopSec).
    assert float(svc["TimeoutStopSec"]) > GatewaySettings().shutdown_grace_s + 5
    for key, value in {
        "DynamicUser": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "NoNewPrivileges": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "CapabilityBoundingSet": "",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
    }.items():
        assert svc[key] == value, key
    argv = shlex.split(svc["ExecStart"])
    assert argv[0] == f"{INSTALLED}mcp-reconciler" and argv[argv.index("--config") + 1] == CONFIG
    assert svc["EnvironmentFile"] == "-/etc/mcp-reconciler/tokens.env"


async def test_execstart_serves_execreload_reloads_killsignal_stops(tmp_path: Path) -> None:
    """The unit's own ExecStart command line (its venv this suite's, its config the demo's, port 0),
    then ExecReload's signal and KillSignal, as systemd would send them to $MAINPID."""
    shutil.copytree(REPO_ROOT / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    config = tmp_path / "examples" / "demo" / "gateway.yaml"
    svc = {key: values[-1] for key, values in service().items()}
    argv = [a.replace(INSTALLED, f"{BIN}/").replace(CONFIG, str(config)) for a in shlex.split(svc["ExecStart"])]
    reload_signal = signal.Signals["SIG" + shlex.split(svc["ExecReload"])[1].removeprefix("-")]
    kill_signal = signal.Signals[svc["KillSignal"]]
    async with gateway_process([*argv, "--port", "0"], cwd=tmp_path) as gw:
        mark = len(gw.lines)
        gw.process.send_signal(reload_signal)
        await gw.wait_line(r"SIGHUP: reload cycle \w+, revision \d+", after=mark)
        code = await stop(gw.process, kill_signal, timeout_s=float(svc["TimeoutStopSec"]))
        assert code == 0, gw.describe()


def test_readme_systemd_block() -> None:
    """The README's install steps put the venv, config and tokens where the unit reads them."""
    text = block("deploy-systemd").text
    svc = {key: values[-1] for key, values in service().items()}
    assert f"python3 -m venv {INSTALLED.removesuffix('/bin/')}" in text
    assert CONFIG in text and svc["EnvironmentFile"].lstrip("-") in text
    assert f"deploy/systemd/{UNIT.name}" in text
    assert "systemctl reload mcp-reconciler" in text and "systemctl enable --now mcp-reconciler" in text
