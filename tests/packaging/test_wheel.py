"""The wheel, as a new user gets it (issue 9): ``pip wheel . --no-deps``, a fresh venv in a
temporary directory outside the clone, ``pip install`` of that wheel (dependencies from the
package index or pip's cache), and everything run from a working directory that has its own
``sdk/`` and ``api/`` folders, where a generic top-level ``sdk`` would be shadowed.

Checked: site-packages gains no top-level ``reconciler``, ``api``, ``sdk`` or ``examples`` (the
distribution's files all live under ``mcp_reconciler/``); ``from mcp_reconciler.sdk import
ReconcilerClient`` imports the installed SDK while ``import sdk`` finds the directory's own;
``mcp-reconciler --version`` is the metadata version; ``mcp-reconciler serve --port 0`` with no
``--config`` serves the bundled demo from package data: ``/healthz`` answers, the control API
answers the demo operator token (and 401 without it), ``mcp-reconciler status`` says ready, and
an MCP client lists the demo's tools. Stopping it stops its upstream processes (I14).

The steps are README.md's "Install from a wheel" block, run by bash as written, with documented
substitutions: ``python3`` is this suite's interpreter, ``/tmp/mcp-venv`` a venv in the test's
temporary directory, ``cd /tmp`` its own working directory, and ``serve`` gets ``--port 0`` (and
``exec``, so the process the test stops is the gateway). The block runs in a copy of the working
tree (without ``.git``, venvs and build output): setuptools builds in place and would otherwise
leave ``build/`` and stale files in the clone."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client

from tests.support.gateway_process import alive, gateway_process, stop
from tests.support.readme import block

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_TOKEN = "demo-operator-token"
DEMO_TOOLS = {"clock__now", "clock__tick", "notes__count_notes", "notes__get_note"}
STEP_TIMEOUT_S = 300.0  # building and installing fetch from the package index on a cold cache
NOT_COPIED = {".git", "build", "dist", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis"}

INSPECT = """
import importlib.metadata as md, json, sys, sysconfig
from pathlib import Path
import sdk as local_sdk                      # this working directory's own sdk/ folder
from mcp_reconciler.sdk import ReconcilerClient
import mcp_reconciler.sdk
site = Path(sysconfig.get_paths()["purelib"])
print(json.dumps({
    "site": str(site),
    "top_level": sorted(p.name for p in site.iterdir()),
    "dist_roots": sorted({f.parts[0] for f in md.files("mcp-reconciler") if not f.parts[0].startswith("..")}),
    "sdk_file": mcp_reconciler.sdk.__file__,
    "client_module": ReconcilerClient.__module__,
    "local_sdk": local_sdk.MARKER,
    "path0": sys.path[0],
    "version": md.version("mcp-reconciler"),
}))
"""


def _ignore(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in NOT_COPIED or n.startswith(".venv") or n.endswith(".egg-info")}


def _clean_env(**extra: str) -> dict[str, str]:
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "MCP_RECONCILER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**env, **extra}


async def _run(*argv: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    with anyio.fail_after(STEP_TIMEOUT_S):
        proc = await anyio.run_process([str(a) for a in argv], cwd=cwd, env=env or _clean_env(), check=False)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}\nstdout:\n{out}\nstderr:\n{err[-3000:]}"
    return out


def readme_script(venv: Path, work: Path) -> str:
    """The README's wheel-install block as a bash script (see the module docstring)."""
    lines = block("wheel-install").lines()
    *setup, serve = [line.split("  #")[0].strip() for line in lines]
    assert serve == f"MCP_RECONCILER_OPERATOR_TOKENS={DEMO_TOKEN} /tmp/mcp-venv/bin/mcp-reconciler serve", serve
    script = "\n".join(["set -euo pipefail", *setup, serve.replace("/tmp/mcp-venv/bin/", "exec /tmp/mcp-venv/bin/")])
    script = re.sub(r"^python3 ", f"{sys.executable} ", script, flags=re.MULTILINE)
    script = script.replace("/tmp/mcp-venv", str(venv)).replace("cd /tmp\n", f"cd {work}\n")
    assert "/tmp/mcp-venv" not in script and "cd /tmp\n" not in script, script  # every substitution applied
    return script + " --port 0\n"


async def test_wheel_in_a_fresh_venv_outside_the_clone(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("wheel")
    assert not tmp.resolve().is_relative_to(REPO_ROOT), "the install must happen outside the clone"
    src, venv, work = tmp / "src", tmp / "venv", tmp / "work"
    shutil.copytree(REPO_ROOT, src, ignore=_ignore, symlinks=True)
    # A project of one's own, with generic folder names.
    for name in ("sdk", "api"):
        (work / name).mkdir(parents=True)
        (work / name / "__init__.py").write_text(f'MARKER = "the working directory\'s own {name}"\n')

    # README: build the wheel, install it into a fresh venv, --version, then `serve` from elsewhere:
    # with no --config, the bundled demo from package data, in place (the venv is ours).
    env = _clean_env()
    script = readme_script(venv, work)
    async with gateway_process(["bash", "-c", script], cwd=src, env=env, startup_timeout_s=STEP_TIMEOUT_S) as gw:
        facts = json.loads(await _run(venv / "bin" / "python", "-c", INSPECT, cwd=work))
        site = Path(facts["site"])
        assert f"mcp-reconciler {facts['version']}" in gw.lines, gw.describe()  # --version: the metadata's
        assert facts["path0"] == ""  # the working directory is first on sys.path (python -c)
        assert not {"reconciler", "api", "sdk", "examples"} & set(facts["top_level"]), facts["top_level"]
        assert facts["dist_roots"] == ["mcp_reconciler", f"mcp_reconciler-{facts['version']}.dist-info"]
        assert Path(facts["sdk_file"]).is_relative_to(site)
        assert facts["client_module"] == "mcp_reconciler.sdk.client"
        assert facts["local_sdk"] == "the working directory's own sdk"

        demo = site / "mcp_reconciler" / "examples" / "demo"
        assert f"mcp-reconciler serving {demo / 'gateway.yaml'}" in gw.lines, gw.describe()
        assert gw.data_dir == demo / "data"
        upstreams = gw.upstreams()
        assert sorted(c.rsplit("/", 1)[-1].split()[0] for c in upstreams.values()) == [
            "clock_server.py",
            "notes_server.py",
        ], upstreams
        cwds = [Path(os.readlink(f"/proc/{pid}/cwd")) for pid in upstreams]  # they run from package data
        assert all(d.is_relative_to(demo) for d in cwds), cwds

        async with httpx2.AsyncClient(base_url=gw.base_url, timeout=30) as http:
            health = await http.get("/healthz")
            assert health.status_code == 200 and health.json() == {"status": "ok"}
            assert (await http.get("/v1/status")).status_code == 401
            status = await http.get("/v1/status", headers={"Authorization": f"Bearer {DEMO_TOKEN}"})
            assert status.status_code == 200, status.text
            assert status.json()["state"] == "ready"
            assert {s["name"] for s in status.json()["sources"]} == {"notes", "clock"}
            for path in ("/ui/", "/ui/app.js", "/ui/app.css", "/ui/favicon.svg"):  # the console ships as package data
                page = await http.get(path)
                assert page.status_code == 200 and page.content, path

        cli = venv / "bin" / "mcp-reconciler"
        operator = _clean_env(MCP_RECONCILER_URL=gw.base_url, MCP_RECONCILER_TOKEN=DEMO_TOKEN)
        assert (await _run(cli, "status", cwd=work, env=operator)).startswith("state       ready")

        with anyio.fail_after(30):
            async with Client(gw.url) as client:
                assert {t.name for t in (await client.list_tools()).tools} == DEMO_TOOLS

        assert await stop(gw.process) == 0, gw.describe()  # SIGINT stops cleanly like SIGTERM (issue 10)
        assert not any("Traceback" in line for line in gw.stderr), gw.describe()
    assert not [pid for pid in upstreams if alive(pid)], "upstream processes outlived the gateway"
