"""README "How names are formed": the two-views config is valid as written and serves exactly the
names the README says, on each endpoint, to each agent's token — over HTTP, with the bundled
example servers; the hidden tool is refused, the renamed ones are callable and their provenance
names the upstream's own name, and ``check-config`` reports an unset token variable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anyio
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.api.server import serve_http
from mcp_reconciler.reconciler.authority import GrantPolicy, principal_id
from mcp_reconciler.reconciler.config import check_config
from mcp_reconciler.reconciler.metadata import PROVENANCE_META
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.support.readme import REPO_ROOT, block

pytestmark = pytest.mark.anyio
WAIT = 30.0
TOKENS = {"AGENT_A_TOKEN": "agent-a-token-0123456789", "AGENT_B_TOKEN": "agent-b-token-0123456789"}


def readme_names() -> dict[str, tuple[set[str], set[str]]]:
    """The ``curation-names`` block: endpoint → (tools, prompts)."""
    out: dict[str, tuple[set[str], set[str]]] = {}
    for line in block("curation-names").lines():
        endpoint, rest = line.split(maxsplit=1)
        tools_part, prompts_part = rest.split("prompts:")
        tools = set(tools_part.removeprefix("tools:").split())
        prompts = set(prompts_part.split()) - {"-"}
        out[endpoint] = (tools, prompts)
    return out


def layout(tmp_path: Path) -> Path:
    """The README's relative paths as in the repository: the config beside ``data/``, next to
    ``../upstreams``."""
    shutil.copytree(REPO_ROOT / "examples" / "upstreams", tmp_path / "upstreams")
    shutil.copytree(REPO_ROOT / "examples" / "demo" / "data", tmp_path / "demo" / "data")
    cfg = tmp_path / "demo" / "gateway.yaml"
    cfg.write_text(block("curation-config").text)
    return cfg


async def test_two_views_for_two_agents_as_the_readme_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = layout(tmp_path)
    unset = [str(p) for p in check_config(cfg, environ={})]
    assert any("AGENT_A_TOKEN is not set" in p for p in unset), unset
    assert check_config(cfg, environ=TOKENS) == []
    for key, value in TOKENS.items():
        monkeypatch.setenv(key, value)
    expected = readme_names()
    assert set(expected) == {"/mcp", "/mcp/assistant", "/mcp/librarian"}
    async with serve_http(cfg, host="127.0.0.1", port=0) as served:
        engine = served.gateway.engine
        live = engine.current
        assert live is not None
        operator = engine.sessions.create(
            principal_id("operator", "readme"), live.generation, policy=GrantPolicy.CURRENT
        )
        tokens = {
            "/mcp": operator.token,
            "/mcp/assistant": TOKENS["AGENT_A_TOKEN"],
            "/mcp/librarian": TOKENS["AGENT_B_TOKEN"],
        }
        base = served.url.removesuffix("/mcp")
        for endpoint, (tools, prompts) in expected.items():
            for mode in ("legacy", "auto"):
                headers = {"Authorization": f"Bearer {tokens[endpoint]}"}
                with anyio.fail_after(WAIT):
                    async with (
                        mcp_http_client(headers=headers) as http,
                        Client(streamable_http_client(base + endpoint, http_client=http), mode=mode) as client,
                    ):
                        listed = (await client.list_tools()).tools
                        assert {t.name for t in listed} == tools, (endpoint, mode)
                        assert {p.name for p in (await client.list_prompts()).prompts} == prompts, (endpoint, mode)
                        for tool in listed:
                            upstream = (tool.meta or {})[PROVENANCE_META].get("upstream_name")
                            assert upstream == {"current_time": "now", "read": "get_note"}.get(tool.name), tool.name
                        try:
                            await client.call_tool("time__tick", {})
                            raise AssertionError("the denied tool answered")
                        except MCPError as exc:
                            assert "unknown tool" in exc.error.message
                        if "current_time" in tools:
                            result = await client.call_tool("current_time", {})
                            assert "now" in json.loads(result.content[0].text)  # type: ignore[union-attr]
                        if "read" in tools:
                            result = await client.call_tool("read", {"name": "first"})
                            assert json.loads(result.content[0].text)["title"] == "first note"  # type: ignore[union-attr]
