"""``mcp-reconciler import FILE`` (issue 28): the three desktop formats in ``tests/fixtures/desktop``
-- Claude Desktop, VS Code (JSON with comments, ``${input:…}``/``${env:…}``), Cursor -- become
gateway configs that ``check-config`` accepts once the variables the header lists are set; no
secret value from the file is ever printed."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import anyio
import pytest

from mcp_reconciler.api.import_config import looks_secret, strip_jsonc
from mcp_reconciler.reconciler.config import load_config
from tests.api.conftest import REPO_ROOT

pytestmark = pytest.mark.anyio

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "desktop"
SECRETS_IN_FIXTURES = (
    "ghp_FIXTUREfixture0123456789abcdefABCD",
    "fixture-remote-secret-0123456789",
    "vs-fixture-key-0123456789abcdef",
    "sk_test_FIXTURE0123456789abcdefghij",
    "ntn_fixture0123456789abcdefghijklmn",
)
EXPECTED = {
    "claude_desktop_config.json": {
        "filesystem": "stdio",
        "github": "stdio",
        "sqlite-db": "stdio",
        "remote-search": "http",
    },
    "vscode_mcp.json": {"Perplexity": "stdio", "fetch": "stdio", "github": "http", "legacy": "sse"},
    "cursor_mcp.json": {"linear": "sse", "stripe": "stdio", "notion": "http", "all-server": "stdio"},
}


async def _cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
    with anyio.fail_after(30):
        proc = await anyio.run_process(
            [sys.executable, "-m", "mcp_reconciler.api.cli", *args],
            cwd=REPO_ROOT,
            env={**base, **(env or {})},
            check=False,
        )
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
async def test_each_desktop_format_round_trips_into_a_config_check_config_accepts(fixture: str, tmp_path: Path) -> None:
    out = tmp_path / "gateway.yaml"
    code, printed, err = await _cli("import", str(FIXTURES / fixture))
    assert code == 0, err
    code, _, err = await _cli("import", str(FIXTURES / fixture), "-o", str(out))
    assert code == 0 and out.read_text() == printed, err
    for secret in SECRETS_IN_FIXTURES:
        assert secret not in printed
    variables = re.findall(r"^#   ([A-Z_][A-Z0-9_]*)  \(", printed, re.M)
    # Without the variables the config is refused, naming each one (so they are really wired).
    code, _, err = await _cli("check-config", str(out))
    if variables:
        assert code == 1 and all(f"environment variable {v} is not set" in err for v in variables), err
    env = {v: f"value-of-{v.lower()}" for v in variables}
    code, _, err = await _cli("check-config", str(out), env=env)
    assert code == 0, (err, printed)
    loaded = load_config(out, environ=env)
    assert {s.name: s.transport["kind"] for s in loaded.specs} == EXPECTED[fixture]


async def test_what_is_secret_becomes_a_variable_and_the_rest_is_kept(tmp_path: Path) -> None:
    out = tmp_path / "claude.yaml"
    assert (await _cli("import", str(FIXTURES / "claude_desktop_config.json"), "-o", str(out)))[0] == 0
    env = {"GITHUB_PERSONAL_ACCESS_TOKEN": "gh-value-1234", "REMOTE_SEARCH_TOKEN": "rs-value-1234"}
    specs = {s.name: s for s in load_config(out, environ=env).specs}
    assert specs["github"].transport["env"]["GITHUB_PERSONAL_ACCESS_TOKEN"] == "gh-value-1234"
    assert specs["sqlite-db"].transport["env"]["LOG_LEVEL"] == "info"  # not a secret: copied
    assert specs["remote-search"].transport["headers"]["Authorization"] == "Bearer rs-value-1234"
    assert specs["filesystem"].transport["args"][-1] == "/Users/me/Downloads"
    vscode = tmp_path / "vscode.yaml"
    assert (await _cli("import", str(FIXTURES / "vscode_mcp.json"), "-o", str(vscode)))[0] == 0
    text = vscode.read_text()
    assert "PERPLEXITY_API_KEY: ${PERPLEXITY_KEY}" in text and "Bearer ${GITHUB_TOKEN}" in text
    # An existing output is not overwritten without --force.
    code, _, err = await _cli("import", str(FIXTURES / "cursor_mcp.json"), "-o", str(vscode))
    assert code == 1 and "--force" in err and vscode.read_text() == text
    assert (await _cli("import", str(FIXTURES / "cursor_mcp.json"), "-o", str(vscode), "--force"))[0] == 0


async def test_files_that_are_not_desktop_configs_are_refused_clearly(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"servers_typo": {}}))
    code, out, err = await _cli("import", str(bad))
    assert code == 1 and out == "" and "no mcpServers" in err
    bad.write_text("{not json")
    code, _, err = await _cli("import", str(bad))
    assert code == 1 and "is not JSON (line 1)" in err
    code, _, err = await _cli("import", str(tmp_path / "missing.json"))
    assert code == 1 and "file not found" in err


def test_jsonc_and_secret_shapes() -> None:
    assert json.loads(strip_jsonc('{"a": "x // not a comment", /* c */ "b": [1, 2,], // end\n}')) == {
        "a": "x // not a comment",
        "b": [1, 2],
    }
    assert looks_secret("GITHUB_TOKEN", "abc") and looks_secret("X", "ghp_" + "a1" * 10)
    assert looks_secret("Authorization", "Bearer x") and looks_secret("X", "k3Jd9sLq0Zp2mWn8Xv4Rt6Yb")
    assert not looks_secret("LOG_LEVEL", "info") and not looks_secret("ROOT", "/Users/me/Desktop/projects/x1")
    assert not looks_secret("API_KEY", "${API_KEY}")
