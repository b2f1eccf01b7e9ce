"""README "Approvals": the config block loads and means what its comments say, the CLI block
answers a real parked call (run by bash against the demo config with that block's approvals
added), and the error table is the front door's own codes (``api/errors.py``)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client

from mcp_reconciler.api.errors import CODES
from mcp_reconciler.api.server import serve_http
from mcp_reconciler.reconciler.approvals import ApprovalRequest
from mcp_reconciler.reconciler.config import load_config
from tests.support.readme import README, REPO_ROOT, block
from tests.support.waits import until

pytestmark = pytest.mark.anyio


def test_approvals_config_block(tmp_path: Path) -> None:
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(block("approvals-config").text)
    policy = load_config(cfg).approvals
    assert policy.requires("notes__count_notes") and policy.requires("deploy_prod")
    assert not policy.requires("notes__read")
    assert (policy.timeout_s, policy.parked_max, policy.parked_per_principal, policy.elicitation) == (300, 64, 8, True)


def test_the_error_table_is_the_front_doors_codes() -> None:
    rows = re.findall(r"^\| (-320\d\d) \| `([a-z_]+)` \|", README.read_text(), re.M)
    assert len(rows) == 5
    for code, name in rows:
        assert CODES[name] == int(code), (code, name)


async def test_approvals_cli_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A demo client's notes__count_notes call parks; the block lists it, shows it and approves
    it for three uses: the call runs, and the next identical call runs without parking."""
    demo = tmp_path / "demo"
    shutil.copytree(REPO_ROOT / "examples" / "demo", demo)
    shutil.copytree(REPO_ROOT / "examples" / "upstreams", tmp_path / "upstreams")
    doc: dict[str, Any] = yaml.safe_load((demo / "gateway.yaml").read_text())
    doc.update(yaml.safe_load(block("approvals-config").text))
    (demo / "gateway.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("MCP_RECONCILER_OPERATOR_TOKENS", "demo-operator-token")
    async with serve_http(demo / "gateway.yaml", port=0) as served:
        parked = anyio.Event()

        def on_request(request: ApprovalRequest) -> None:
            if request.state == "pending":
                parked.set()

        served.gateway.engine.approvals.add_listener(on_request)
        results: list[Any] = []
        async with Client(served.url, mode="legacy") as client, anyio.create_task_group() as tg:

            async def call() -> None:
                results.append(await client.call_tool("notes__count_notes", {}))

            tg.start_soon(call)
            with anyio.fail_after(30):
                await parked.wait()
            script = block("approvals-cli").text.replace(
                ".venv/bin/mcp-reconciler", f"{sys.executable} -m mcp_reconciler.api.cli"
            ).replace("http://127.0.0.1:8765", served.base_url)
            env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
            with anyio.fail_after(60):
                run = await anyio.run_process(["bash", "-euxc", script], cwd=REPO_ROOT, env=env, check=False)
            out, err = run.stdout.decode(), run.stderr.decode()
            assert run.returncode == 0, (out, err)
            assert "notes__count_notes" in out and "pending" in out and "definition  sha256" in out, out
            await until(lambda: results, what="results", timeout_s=30)
            assert not results[0].is_error
            with anyio.fail_after(30):  # covered by --uses 3: it does not park
                again = await client.call_tool("notes__count_notes", {})
            assert not again.is_error
