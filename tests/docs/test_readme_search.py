"""README "Large catalogs: search mode": the config is valid as written, and the SDK demo — run
as its own process against the gateway serving that config over HTTP, with the bundled example
servers — prints exactly the README's output (both blocks as written; only the port differs)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import anyio
import pytest

from mcp_reconciler.api.server import serve_http
from mcp_reconciler.reconciler.config import check_config
from tests.support.readme import REPO_ROOT, block

pytestmark = pytest.mark.anyio
WAIT = 60.0


def layout(tmp_path: Path) -> Path:
    """The README's relative paths as in the repository: the config beside ``data/``, next to
    ``../upstreams``."""
    shutil.copytree(REPO_ROOT / "examples" / "upstreams", tmp_path / "upstreams")
    shutil.copytree(REPO_ROOT / "examples" / "demo" / "data", tmp_path / "demo" / "data")
    cfg = tmp_path / "demo" / "gateway.yaml"
    cfg.write_text(block("search-config").text)
    return cfg


async def test_search_mode_demo_prints_what_the_readme_says(tmp_path: Path) -> None:
    cfg = layout(tmp_path)
    assert check_config(cfg, environ={}) == []
    async with serve_http(cfg, host="127.0.0.1", port=0) as served:
        demo = tmp_path / "search_demo.py"
        demo.write_text(block("search-demo").text.replace("127.0.0.1:8765", f"127.0.0.1:{served.port}"))
        with anyio.fail_after(WAIT):
            done = await anyio.run_process([sys.executable, str(demo)], cwd=str(REPO_ROOT), check=False)
        assert done.returncode == 0, done.stderr.decode()
        assert done.stdout.decode() == block("search-output").text
