"""Settings from the environment (issue 28): ``${VAR}`` in number and boolean keys, and
``MCP_RECONCILER_CONFIG``, ``_HOST``, ``_PORT``, ``_LOG_LEVEL``, ``_LOG_FORMAT`` -- flags win
over the environment, the environment over the config file. Interpolated values stay secrets."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx2
import pytest

from mcp_reconciler.api.cli import apply_environment, build_parser
from mcp_reconciler.reconciler.config import ConfigError, load_config
from tests.api.conftest import OPERATOR_TOKEN, REPO_ROOT, upstream_source
from tests.support.gateway_process import gateway_process

pytestmark = pytest.mark.anyio


def _write(tmp: Path, text: str) -> Path:
    cfg = tmp / "gateway.yaml"
    cfg.write_text(text)
    return cfg


def test_numbers_and_booleans_come_from_the_environment(tmp_path: Path) -> None:
    cfg = _write(
        tmp_path,
        "gateway: {port: ${GW_PORT}, cooldown_s: ${GW_COOLDOWN}, expose_control_tools: ${GW_TOOLS}}\n"
        "sources:\n  - name: a\n    stdio: {command: python}\n    timeouts: {connect_s: ${A_CONNECT}}\n",
    )
    env = {"GW_PORT": "18765", "GW_COOLDOWN": "0.25", "GW_TOOLS": "true", "A_CONNECT": "12.5"}
    loaded = load_config(cfg, environ=env)
    assert loaded.settings.port == 18765 and loaded.settings.cooldown_s == 0.25
    assert loaded.settings.expose_control_tools is True
    assert loaded.specs[0].transport["timeouts"]["connect_s"] == 12.5
    # Interpolated values are secrets like every other (redacted by value in the log).
    assert {"18765", "12.5"} <= loaded.secret_values


def test_an_unset_or_wrong_typed_variable_names_file_line_and_key(tmp_path: Path) -> None:
    cfg = _write(tmp_path, "gateway:\n  port: ${GW_PORT}\nsources: []\n")
    with pytest.raises(ConfigError) as unset:
        load_config(cfg, environ={})
    text = str(unset.value)
    assert f"{cfg}:2: gateway.port: environment variable GW_PORT is not set" in text, text
    with pytest.raises(ConfigError) as wrong:
        load_config(cfg, environ={"GW_PORT": "eighty"})
    text = str(wrong.value)
    assert f"{cfg}:2: gateway.port: input should be a valid integer" in text and "eighty" not in text, text


def _args(argv: list[str], environ: dict[str, str]) -> object:
    parser = build_parser()
    args = parser.parse_args(argv)
    apply_environment(parser, args, environ)
    return args


def test_flags_win_over_the_environment_and_bad_values_are_usage_errors() -> None:
    env = {
        "MCP_RECONCILER_CONFIG": "/etc/gw.yaml",
        "MCP_RECONCILER_HOST": "0.0.0.0",
        "MCP_RECONCILER_PORT": "9100",
        "MCP_RECONCILER_LOG_LEVEL": "info",
        "MCP_RECONCILER_LOG_FORMAT": "json",
    }
    a = _args(["serve"], env)
    assert (a.config, a.host, a.port, a.log_level, a.log_format) == ("/etc/gw.yaml", "0.0.0.0", 9100, "info", "json")  # type: ignore[attr-defined]
    b = _args(["--log-level", "debug", "--log-format", "text", "serve", "--config", "x.yaml", "--port", "1"], env)
    assert (b.config, b.port, b.log_level, b.log_format) == ("x.yaml", 1, "debug", "text")  # type: ignore[attr-defined]
    c = _args(["check-config"], env)
    assert c.file == "/etc/gw.yaml"  # type: ignore[attr-defined]
    d = _args(["serve"], {})
    assert (d.config, d.host, d.port, d.log_level, d.log_format) == (None, None, None, "WARNING", "text")  # type: ignore[attr-defined]
    for bad in (
        {"MCP_RECONCILER_PORT": "http"},
        {"MCP_RECONCILER_LOG_FORMAT": "xml"},
        {"MCP_RECONCILER_LOG_LEVEL": "loud"},
    ):
        with pytest.raises(SystemExit) as usage:
            _args(["serve"], bad)
        assert usage.value.code == 2
    with pytest.raises(SystemExit):
        _args(["reconcile"], {})


async def test_serve_reads_config_host_port_and_log_format_from_the_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "gateway.yaml"
    # The file says port 1 (never bindable here) and host 127.0.0.2: the environment's port 0
    # (an ephemeral port, reported in the banner) and host must win over them.
    cfg.write_text(json.dumps({"gateway": {"port": 1, "host": "127.0.0.2"}, "sources": [upstream_source("up", "a")]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
    env.update(
        MCP_RECONCILER_CONFIG=str(cfg),
        MCP_RECONCILER_HOST="127.0.0.1",
        MCP_RECONCILER_PORT="0",
        MCP_RECONCILER_LOG_LEVEL="INFO",
        MCP_RECONCILER_LOG_FORMAT="json",
        MCP_RECONCILER_OPERATOR_TOKENS=OPERATOR_TOKEN,
    )
    argv = [sys.executable, "-m", "mcp_reconciler.api.cli", "serve"]
    async with gateway_process(argv, cwd=REPO_ROOT, env=env) as gw:
        assert gw.url.startswith("http://127.0.0.1:") and gw.port not in (0, 1), gw.describe()
        async with httpx2.AsyncClient() as http:
            assert (await http.get(f"http://127.0.0.1:{gw.port}/healthz")).status_code == 200
        await gw.wait_line(r"revision 1")
    records = [json.loads(line) for line in gw.stderr if line.startswith("{")]
    assert records and any(r["level"] == "info" for r in records), gw.describe()
