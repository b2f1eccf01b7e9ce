"""The TypeScript SDK's clients as an oracle: ``tests/ts_oracle/oracle.mjs`` and its pinned
dependencies (``package.json`` + ``package-lock.json`` beside it).

:func:`installed` runs ``npm ci`` there once per lock file (the ``node_modules`` it makes stays in
the clone, ignored by git, and is reused while the lock file is unchanged); :func:`run` runs the
script against one endpoint and returns its JSON lines keyed by (client, step).

Without ``node`` (≥ 20) or ``npm`` the caller's test skips with the reason — except under
``CI=true``, where it fails, as the Redis and browser tests do: CI must never pass by skipping."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.integration.conftest import REPO_ROOT

HERE = REPO_ROOT / "tests" / "ts_oracle"
SCRIPT = HERE / "oracle.mjs"
_STAMP = "node_modules/.mcp-reconciler-lock-sha256"  # which lock file the installed tree is from
INSTALL_TIMEOUT_S = 300.0
RUN_TIMEOUT_S = 90.0

Outcomes = dict[tuple[str, str], dict[str, Any]]


def _unavailable(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: the TypeScript-client oracle must run, but {message}")
    pytest.skip(message)


def node_binary() -> str:
    """``node`` on PATH at version 20 or later (the v2 client's engines field)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _unavailable("node and npm are needed (Debian: apt-get install nodejs npm)")
        raise AssertionError("unreachable")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    if int(version.lstrip("v").split(".")[0] or 0) < 20:
        _unavailable(f"node {version} is too old: the pinned @modelcontextprotocol/client needs node >= 20")
    return node


def installed() -> Path:
    """The oracle script, with its pinned dependencies installed (``npm ci`` when the lock file
    changed since the last install, or on a fresh clone)."""
    node_binary()
    digest = hashlib.sha256((HERE / "package-lock.json").read_bytes()).hexdigest()
    stamp = HERE / _STAMP
    # One installer at a time: the suite's workers (pytest-xdist) may reach here at once, and two
    # `npm ci` in one folder remove each other's node_modules. The lock is released when the file
    # closes; a waiter then finds the stamp and installs nothing.
    with (HERE / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _install(digest, stamp)
    return SCRIPT


def _install(digest: str, stamp: Path) -> None:
    """``npm ci`` unless ``stamp`` says the installed tree is from the lock file ``digest``."""
    if not stamp.exists() or stamp.read_text().strip() != digest:
        done = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--silent"],
            cwd=HERE,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
        )
        if done.returncode != 0:
            pytest.fail(f"npm ci in {HERE} failed ({done.returncode}): {done.stderr.strip()[-800:]}")
        stamp.write_text(digest)


async def run(script: Path, url: str, prefix: str) -> Outcomes:
    """One run of the sequence against ``url``: (client, step) → ``{"result": ...}`` or
    ``{"error": {...}}``, in the order the script printed them."""
    with anyio.fail_after(RUN_TIMEOUT_S):
        done = await anyio.run_process([node_binary(), str(script), url, prefix], cwd=HERE, check=False)
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 0, f"oracle.mjs exited {done.returncode}: {done.stderr.decode()[-2000:]}"
    outcomes: Outcomes = {}
    for line in lines:
        entry = json.loads(line)
        outcomes[(entry.pop("client"), entry.pop("step"))] = entry
    return outcomes
