"""Why a source failed, produced for real and asserted where an operator looks (issue 28, ADR 0027):
``/v1/sources``, ``/v1/sources/{name}`` and the CLI's ``sources`` and ``status``.

Every cause comes from a real failure: a refused port, a missing binary, a server exiting 3
(with a planted secret on its stderr), a TLS handshake against a plain HTTP port, a 401 from a
real MCP endpoint (another gateway's ``/mcp``, which wants a bearer token, I16), a server too
slow for ``timeouts.connect_s``, and -- when ``npx`` is installed -- an npm package that does
not exist (the npm registry answers 404; its stderr is the cause's tail). An agent connected to
the gateway never sees any of it (I12)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import MCPError

from mcp_reconciler.reconciler.failure_cause import DEFAULT_STARTUP_S, launcher, startup_allowance
from mcp_reconciler.reconciler.redaction import MASK
from tests.api.conftest import (
    ALICE,
    OPERATOR_TOKEN,
    mcp_client,
    served_gateway,
    upstream_source,
    write_config,
)
from tests.api.test_cli import cli_all
from tests.support.ports import refusing_port as _refusing
from tests.support.waits import until

pytestmark = pytest.mark.anyio

PLANTED = "planted-Secret-9f8e7d6c"  # reaches the upstream through ${PLANTED_SECRET}
PATTERN_SECRET = "tok-4242-shaped-like-a-token"  # redacted by shape: "token=..."


def _exits_3() -> dict[str, Any]:
    script = (
        "import os, sys; sys.stderr.write('starting with key ' + os.environ['KEY'] + '\\n');"
        f"sys.stderr.write('token={PATTERN_SECRET}\\n'); sys.stderr.write('fatal: cannot open db\\n'); sys.exit(3)"
    )
    return {
        "name": "exits",
        "stdio": {"command": "python", "args": ["-c", script], "env": {"KEY": "${PLANTED_SECRET}"}},
    }


def _slow() -> dict[str, Any]:
    return {
        "name": "slow",
        "stdio": {"command": "python", "args": ["-c", "import time; time.sleep(60)"]},
        "timeouts": {"connect_s": 1},
    }


async def test_each_failure_cause_is_typed_in_v1_and_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANTED_SECRET", PLANTED)
    # A real MCP endpoint that answers 401 without a bearer token: another gateway's /mcp.
    with _refusing() as refused:  # bound and not listening: connecting is refused
        async with served_gateway(write_config(tmp_path, name="other.yaml")) as other:
            plain = other.url  # http://127.0.0.1:<port>/mcp
            sources = [
                upstream_source("ok", "a"),
                {"name": "refused", "http": {"url": f"http://127.0.0.1:{refused}/mcp"}},
                {"name": "missing", "stdio": {"command": "no-such-mcp-server-binary"}},
                _exits_3(),
                {"name": "tls", "http": {"url": plain.replace("http://", "https://")}},
                {"name": "unauthorized", "http": {"url": plain}},
                _slow(),
            ]
            cfg = write_config(tmp_path, sources=sources)
            async with served_gateway(cfg) as served:
                headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
                async with httpx2.AsyncClient(base_url=served.base_url, headers=headers) as http:

                    async def causes() -> dict[str, Any]:
                        res = await http.get("/v1/sources")
                        assert res.status_code == 200, res.text
                        return {s["name"]: s for s in res.json()}

                    failing = {s["name"] for s in sources} - {"ok"}
                    latest: dict[str, Any] = {}

                    async def all_failed() -> bool:
                        latest.update(await causes())
                        return all(latest.get(n, {}).get("cause") for n in failing)

                    await until(all_failed, what="every failing source has a cause")
                    by = latest
                    assert by["ok"]["state"] == "ready" and by["ok"]["cause"] is None
                    kinds = {n: by[n]["cause"]["kind"] for n in failing}
                    assert kinds == {
                        "refused": "connection_refused",
                        "missing": "process_not_found",
                        "exits": "process_exited",
                        "tls": "tls",
                        "unauthorized": "http_status",
                        "slow": "timeout",
                    }, kinds
                    for name in failing:  # the cause's summary is the last error everyone shows
                        assert by[name]["last_error"] == by[name]["cause"]["summary"]
                    assert by["exits"]["cause"]["exit_code"] == 3
                    assert by["exits"]["last_error"].startswith("process exited with code 3")
                    tail = by["exits"]["cause"]["stderr_tail"]
                    assert tail[-1] == "fatal: cannot open db" and f"starting with key {MASK}" in tail, tail
                    assert f"token={MASK}" in tail, tail
                    assert by["unauthorized"]["cause"]["http_status"] == 401
                    assert by["unauthorized"]["last_error"].startswith("HTTP 401")
                    assert by["slow"]["cause"]["setting"] == "timeouts.connect_s"
                    assert by["slow"]["cause"]["timeout_s"] == 1
                    assert "timeouts.connect_s" in by["slow"]["last_error"]
                    one = await http.get("/v1/sources/exits")
                    assert one.status_code == 200 and one.json()["cause"]["exit_code"] == 3
                    for path in ("/v1/sources", "/v1/status", "/v1/sources/exits"):
                        text = (await http.get(path)).text
                        assert PLANTED not in text and PATTERN_SECRET not in text, path
                    # An owner (not an operator) gets the typed cause, not the upstream's own words.
                    owner = await http.get("/v1/sources/exits", headers={"Authorization": f"Bearer {ALICE}"})
                    assert owner.status_code == 200, owner.text
                    assert owner.json()["cause"]["exit_code"] == 3 and owner.json()["cause"]["stderr_tail"] == []

                env = {"url": served.base_url, "token": OPERATOR_TOKEN}
                # Three reads at once: a Python start per command is most of their time.
                sources_run, status_run, run = await cli_all(
                    [(("sources",), env), (("status",), env), (("sources", "--json"), env)]
                )
                for printed in (sources_run, status_run):
                    assert PLANTED not in printed.out + printed.err and PATTERN_SECRET not in printed.out + printed.err
                    assert "process exited with code 3" in printed.out, printed.out
                    assert "HTTP 401" in printed.out and "connection refused" in printed.out, printed.out
                    assert "stderr | fatal: cannot open db" in printed.out, printed.out
                    assert "slow: timeout (setting: timeouts.connect_s)" in printed.out, printed.out
                listed = {s["name"]: s for s in json.loads(run.out)}
                assert listed["tls"]["cause"]["kind"] == "tls"

                # An agent sees none of it: its own listing and errors carry no upstream words (I12).
                async with mcp_client(served) as client:
                    tools = await client.list_tools()
                    with pytest.raises(MCPError) as refused:
                        await client.call_tool("exits__anything", {})
                agent_text = json.dumps([t.model_dump(mode="json") for t in tools.tools]) + str(refused.value.error)
                for words in (PLANTED, PATTERN_SECRET, "cannot open db", "exited with code"):
                    assert words not in agent_text


async def test_a_slow_first_start_gets_the_startup_allowance(tmp_path: Path) -> None:
    """``timeouts.startup_s`` covers a first start slower than ``connect_s``; later connects get ``connect_s``."""
    script = (
        "import runpy, sys, time; time.sleep(2.5);"
        "sys.argv = ['upstream_server', '--tools', 'a'];"
        "runpy.run_module('tests.support.upstream_server', run_name='__main__')"
    )
    source = upstream_source("late", "a")
    source["stdio"]["args"] = ["-c", script]
    source["timeouts"] = {"connect_s": 1, "startup_s": 20}
    async with served_gateway(write_config(tmp_path, sources=[source])) as served:
        states = served.gateway.engine.status
        st = await states()
        assert {s.name: s.state for s in st.sources} == {"late": "ready"}, st.sources


def test_launchers_get_a_startup_allowance_by_default() -> None:
    assert launcher("npx") and launcher("/usr/local/bin/uvx") and launcher("docker") and not launcher("python")
    stdio = {"kind": "stdio", "command": "npx", "args": ["-y", "pkg"], "timeouts": {"connect_s": 10.0}}
    assert startup_allowance(stdio) == DEFAULT_STARTUP_S
    assert startup_allowance({**stdio, "timeouts": {"connect_s": 10.0, "startup_s": 90.0}}) == 90.0
    assert startup_allowance({**stdio, "command": sys.executable}) is None
    assert startup_allowance({"kind": "http", "url": "http://x", "timeouts": {}}) is None


@pytest.mark.skipif(shutil.which("npx") is None, reason="npx is not installed")
async def test_an_npm_package_that_does_not_exist_says_so(tmp_path: Path) -> None:
    """``npx -y`` of a missing package: npm exits 1 after the registry's 404; the cause shows its words (redacted)."""
    source = {"name": "npm", "stdio": {"command": "npx", "args": ["-y", "@mcp-reconciler-test/no-such-package-xyz"]}}
    async with served_gateway(write_config(tmp_path, sources=[source])) as served:
        await until(lambda: served.gateway.rec.health.get("npm").cause is not None, timeout_s=60, what="a cause")
        cause = served.gateway.rec.health.get("npm").cause
        assert cause is not None and cause.kind == "process_exited" and cause.exit_code != 0, cause
        assert any("404" in line for line in cause.stderr_tail), cause.stderr_tail
