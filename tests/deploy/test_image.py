"""The container image (deploy/Containerfile) run with podman, as README "Deploy" runs it: the
image's config (non-root, tini as PID 1, STOPSIGNAL, HEALTHCHECK), the bundled demo on a read-only
root file system answering /healthz and listing its tools to an MCP client, SIGTERM ending it with
exit 0 and no process left, and a mounted config (the Kubernetes base's) with its Host allow-list.

Slow, and not part of ``make test``: ``make image-test`` builds the image (``make image``) and
runs these with the podman flags this machine needs (Makefile ``PODMAN_FLAGS``). Elsewhere they
skip when podman or the image is missing; under ``make image-test``
(``MCP_RECONCILER_TEST_IMAGE`` set) a missing one fails them."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.support.gateway_process import alive
from tests.support.readme import REPO_ROOT, block

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

IMAGE = os.environ.get("MCP_RECONCILER_TEST_IMAGE", "localhost/mcp-reconciler:dev")
#: What Debian's podman 4.3 needs on this machine (the Makefile's PODMAN_FLAGS): runc, ulimits
#: within the hard limits, the host's network.
FLAGS = shlex.split(
    os.environ.get(
        "MCP_RECONCILER_TEST_PODMAN_FLAGS",
        "--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --network host",
    )
)
DEMO_TOOLS = {"clock__now", "clock__tick", "notes__count_notes", "notes__get_note"}
K8S_CONFIG = REPO_ROOT / "deploy" / "kubernetes" / "base" / "gateway.yaml"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 60.0


def _unavailable(message: str) -> None:
    if "MCP_RECONCILER_TEST_IMAGE" in os.environ:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def podman() -> str:
    from shutil import which

    path = which("podman")
    if path is None:
        _unavailable("podman is not installed (Debian package podman; then `make image-test`)")
        raise AssertionError  # unreachable
    if subprocess.run([path, "image", "exists", IMAGE], check=False, timeout=60).returncode != 0:
        _unavailable(f"no image {IMAGE}: build it with `make image` (or run `make image-test`)")
    return path


def run(podman: str, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([podman, *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check:
        assert proc.returncode == 0, f"podman {' '.join(args)}: {proc.returncode}\n{proc.stderr}"
    return proc


@pytest.fixture
def container(podman: str) -> Iterator[str]:
    """A container name of this test's own; the container is removed (forced) afterwards."""
    name = f"mcp-reconciler-test-{uuid.uuid4().hex[:8]}"
    try:
        yield name
    finally:
        run(podman, "rm", "--force", "--ignore", "--time", "0", name, check=False)


def readme_run_line(*, config: bool) -> list[str]:
    """The README's ``podman run`` line with (or without) a mounted config, as argv."""
    runs = [x for x in block("deploy-image").lines() if x.startswith("podman run")]
    (line,) = [x for x in runs if ("/etc/mcp-reconciler/gateway.yaml" in x) == config]
    return shlex.split(line.split(" #", 1)[0])


def detached(argv: list[str], name: str, *extra: str) -> list[str]:
    """The README's ``podman run ARGS IMAGE`` detached, named, with this machine's flags (README:
    ``-p [127.0.0.1:]8765:8765``; with --network host the port is the container's own:
    ``MCP_RECONCILER_PORT=0``, an ephemeral port the banner reports, :func:`wait_healthy`)."""
    assert argv[:2] == ["podman", "run"] and argv[-1] == "localhost/mcp-reconciler:dev", argv
    args = [a for a in argv[2:-1] if a not in ("--rm", "-it")]
    if "-p" in args:
        i = args.index("-p")
        assert args[i + 1] in ("8765:8765", "127.0.0.1:8765:8765"), args
        del args[i : i + 2]
    # Only what the README mounts is writable (podman adds tmpfs on /run, /var/tmp, /tmp otherwise).
    own = ["--read-only-tmpfs=false", "-e", "MCP_RECONCILER_PORT=0"]
    return ["run", "--detach", "--name", name, *FLAGS, *own, *args, *extra, IMAGE]


async def wait_healthy(podman: str, name: str) -> int:
    """The port the container's gateway listens on (from its banner), once ``/healthz`` answers there."""
    with anyio.fail_after(START_TIMEOUT_S):
        async with httpx2.AsyncClient(timeout=5) as http:
            while True:
                banner = re.search(r"MCP endpoint: http://[^\s]+:(\d+)/mcp", run(podman, "logs", name).stdout)
                try:
                    if banner and (await http.get(f"http://127.0.0.1:{banner[1]}/healthz")).status_code == 200:
                        return int(banner[1])
                except httpx2.TransportError:
                    pass
                state = json.loads(run(podman, "inspect", "--format", "{{json .State}}", name).stdout)
                assert state["Status"] == "running", run(podman, "logs", name, check=False).stderr
                await anyio.sleep(0.2)  # a container (another process) starting: bounded by START_TIMEOUT_S


def host_pids(podman: str, name: str) -> set[int]:
    out = run(podman, "top", name, "hpid").stdout.split()
    return {int(x) for x in out[1:]}


def test_image_config(podman: str) -> None:
    (info,) = json.loads(run(podman, "image", "inspect", IMAGE).stdout)
    config: dict[str, Any] = info["Config"]
    assert config["User"] == "10001:10001"
    assert config["StopSignal"] == "SIGTERM"
    assert config["Entrypoint"][:2] == ["tini", "--"]
    assert "8765/tcp" in config["ExposedPorts"]
    health = info.get("Healthcheck") or config.get("Healthcheck")
    assert health and "/healthz" in " ".join(health["Test"]), info
    # A command line passes through to mcp-reconciler (README: check-config in the image).
    proc = run(podman, "run", "--rm", *FLAGS, IMAGE, "--version")
    assert proc.stdout.startswith("mcp-reconciler "), proc
    mount = f"{K8S_CONFIG}:/etc/mcp-reconciler/gateway.yaml:ro"
    proc = run(podman, "run", "--rm", *FLAGS, "-v", mount, IMAGE, "check-config", "/etc/mcp-reconciler/gateway.yaml")
    assert proc.returncode == 0, proc
    proc = run(podman, "run", "--rm", *FLAGS, "--entrypoint", "id", IMAGE)
    assert proc.stdout.startswith("uid=10001"), proc.stdout
    # A config that is named but missing is an error, never the demo.
    proc = run(podman, "run", "--rm", *FLAGS, "-e", "MCP_RECONCILER_CONFIG=/etc/nowhere.yaml", IMAGE, check=False)
    assert proc.returncode == 1 and "/etc/nowhere.yaml is not a file" in proc.stderr, proc


async def test_demo_container_serves_and_stops_on_sigterm(podman: str, container: str) -> None:
    # No tokens, as the Kubernetes base's Secret sets them (empty): /v1 stays closed.
    run(podman, *detached(readme_run_line(config=False), container, "-e", "MCP_RECONCILER_OPERATOR_TOKENS="))
    base_url = f"http://127.0.0.1:{await wait_healthy(podman, container)}"
    async with httpx2.AsyncClient(timeout=10) as http:
        closed = await http.get(f"{base_url}/v1/status", headers={"Authorization": "Bearer guess"})
        assert closed.status_code == 401, closed.text
    assert "no control-API tokens configured" in run(podman, "logs", container).stderr
    async with mcp_http_client() as http:
        async with Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client:
            assert {t.name for t in (await client.list_tools()).tools} == DEMO_TOOLS
    # The image's HEALTHCHECK, run by podman in the container.
    assert run(podman, "healthcheck", "run", container, check=False).returncode == 0
    pids = host_pids(podman, container)
    assert len(pids) == 4, pids  # tini, the gateway, the demo's two stdio upstreams
    state = json.loads(run(podman, "inspect", "--format", "{{json .State}}", container).stdout)
    assert alive(state["Pid"])
    # SIGTERM to PID 1 (what `podman stop`, docker and the kubelet send: STOPSIGNAL).
    run(podman, "kill", "--signal", "SIGTERM", container)
    code = run(podman, "wait", container, timeout=STOP_TIMEOUT_S).stdout.strip()
    logs = run(podman, "logs", container).stderr
    assert code == "0", logs
    assert "Traceback" not in logs, logs
    assert not {pid for pid in pids if alive(pid)}, "a process of the container outlived it"


async def test_mounted_config_and_allowed_hosts(podman: str, container: str, tmp_path: Path) -> None:
    """The Kubernetes base's config, mounted where the image looks, with an operator token: the
    Service's name passes the Host check, a foreign Host gets 421; the probes answer any Host."""
    argv = readme_run_line(config=True)
    config = tmp_path / "gateway.yaml"
    config.write_text(K8S_CONFIG.read_text())
    mounts = [a for a in argv if a.endswith(":/etc/mcp-reconciler/gateway.yaml:ro")]
    assert len(mounts) == 1, argv
    argv = [f"{config}:/etc/mcp-reconciler/gateway.yaml:ro" if a in mounts else a for a in argv]
    token = uuid.uuid4().hex
    argv = [
        f"MCP_RECONCILER_OPERATOR_TOKENS={token}" if a.startswith("MCP_RECONCILER_OPERATOR_TOKENS=") else a
        for a in argv
    ]
    run(podman, *detached(argv, container))
    port = await wait_healthy(podman, container)
    base_url = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(timeout=10) as http:
        ok = await http.get(f"{base_url}/v1/status", headers={**auth, "Host": f"mcp-reconciler:{port}"})
        assert ok.status_code == 200, ok.text
        assert [s["name"] for s in ok.json()["sources"]] == ["clock"]
        foreign = await http.get(f"{base_url}/v1/status", headers={**auth, "Host": f"evil.example:{port}"})
        assert foreign.status_code == 421
        probe = await http.get(f"{base_url}/readyz", headers={"Host": "10.0.0.7:8765"})
        assert probe.status_code == 200
    run(podman, "kill", "--signal", "SIGTERM", container)
    assert run(podman, "wait", container, timeout=STOP_TIMEOUT_S).stdout.strip() == "0"


def test_readme_image_block() -> None:
    """`make image` is the Makefile's podman build of deploy/Containerfile on the local base."""
    lines = block("deploy-image").lines()
    assert lines[0].startswith("make image ")
    proc = subprocess.run(["make", "-n", "image"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "podman build --format docker" in proc.stdout and "-f deploy/Containerfile" in proc.stdout
    assert "-t localhost/mcp-reconciler:dev" in proc.stdout and "deploy/make-base.sh" in proc.stdout


def test_readme_layer_block() -> None:
    """The npx/uvx layer starts from the image `make image` tags, installs uv with the image's pip
    (the venv's: first on PATH) and gives the user back; HOME, where npm and uv cache, is /tmp."""
    lines = block("deploy-layer").lines()
    containerfile = (REPO_ROOT / "deploy" / "Containerfile").read_text()
    assert lines[0] == "FROM localhost/mcp-reconciler:dev"
    (user,) = [x for x in containerfile.splitlines() if x.startswith("USER ")]
    assert lines[-1] == user and lines[1] == "USER root"
    assert "ENV PATH=/opt/mcp-reconciler/bin:" in containerfile and "HOME=/tmp" in containerfile
    assert "pip install --no-cache-dir uv" in block("deploy-layer").text
