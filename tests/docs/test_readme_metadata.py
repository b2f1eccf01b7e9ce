"""README "Untrusted metadata (I20)": the config example is valid and means what the text says,
and the served definition and status diagnostics shown are what the gateway really answers for
the test fixture (``tests/support/poisoned_server.py``), over HTTP with an operator token."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.api.server import serve_http
from mcp_reconciler.reconciler.config import load_config
from mcp_reconciler.reconciler.projection import Trust
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.support.readme import REPO_ROOT, block

pytestmark = pytest.mark.anyio
TOKEN = "readme-operator-token"


def test_metadata_config_example(tmp_path: Path) -> None:
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(block("metadata-config").text)
    specs = {s.name: s for s in load_config(cfg).specs}
    assert specs["search"].trust is Trust.UNTRUSTED and specs["notes"].trust is Trust.UNTRUSTED
    assert specs["search"].policy.overrides["web_search"].description == "Search the web."


async def test_I20_readme_served_definition_and_diagnostics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def source(name: str, variant: str, **extra: Any) -> dict[str, Any]:
        args = ["-m", "tests.support.poisoned_server", "--variant", variant]
        return {"name": name, "stdio": {"command": "python", "args": args, "cwd": str(REPO_ROOT)}, **extra}

    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(json.dumps({"sources": [source("mail", "mail"), source("poison", "poisoned", trust="untrusted")]}))
    monkeypatch.setenv("MCP_RECONCILER_OPERATOR_TOKENS", TOKEN)
    async with serve_http(cfg, port=0) as served:
        # /mcp needs a credential (I16): a session holding every current name.
        session = served.gateway.engine.sessions.create("owner::readme", served.gateway.engine.current.generation)  # type: ignore[union-attr]
        headers = {"Authorization": f"Bearer {session.token}"}
        async with (
            mcp_http_client(headers=headers) as http,
            Client(streamable_http_client(served.url, http_client=http), mode="legacy") as client,
        ):
            tools = {t.name: t for t in (await client.list_tools()).tools}
        shown = json.loads(block("metadata-served").text)
        assert tools["poison__search"].model_dump(mode="json", by_alias=True, exclude_none=True) == shown

        def get_status() -> dict[str, Any]:
            url = served.url.rsplit("/mcp", 1)[0] + "/v1/status"
            request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
            with urllib.request.urlopen(request, timeout=30) as response:
                return dict(json.loads(response.read()))

        status = await anyio.to_thread.run_sync(get_status)
    for diagnostic in json.loads("[" + block("metadata-status").text + "]"):
        assert diagnostic in status["diagnostics"], diagnostic
    assert {s["name"]: s["trust"] for s in status["sources"]} == {"mail": "trusted", "poison": "untrusted"}
