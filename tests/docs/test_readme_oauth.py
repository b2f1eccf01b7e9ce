"""README's OAuth blocks (section "Security"), checked against a real gateway: the ``oauth:``
config loads as written; its roles and grant rules, served with the local authorization server
as the issuer and the gateway's own URL as the resource, give the challenge the README shows (its
example URLs substituted) and the Python snippet, run as written, lists the tools a token's scopes
grant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import yaml

from mcp_reconciler.reconciler.config import load_config
from tests.api.test_oauth_gateway import oauth_gateway
from tests.support.authz_server import authz_server
from tests.support.readme import block

pytestmark = pytest.mark.anyio

EXAMPLE_GATEWAY = "https://gateway.example.com"
WAIT = 30.0


def _section() -> dict[str, Any]:
    section = yaml.safe_load(block("oauth-config").text)["oauth"]
    assert isinstance(section, dict)
    return section


def test_oauth_config_block_loads(tmp_path: Path) -> None:
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(block("oauth-config").text + "sources:\n  - name: notes\n    stdio: {command: python}\n")
    oauth = load_config(cfg).oauth
    assert oauth is not None
    assert oauth.resource == f"{EXAMPLE_GATEWAY}/mcp" and [i.issuer for i in oauth.issuers] == [
        "https://login.example.com"
    ]
    assert oauth.roles.required_scopes == ("mcp",) and oauth.roles.operator_scopes == ("mcp:admin",)
    assert (oauth.grants.policy, oauth.grants.scope_prefix) == ("explicit", "tool:")


async def test_oauth_challenge_and_call_blocks(tmp_path: Path) -> None:
    section = _section()
    namespace: dict[str, Any] = {}
    exec(compile(block("oauth-call").text, "README.md:oauth-call", "exec"), namespace)
    async with (
        authz_server() as az,
        oauth_gateway(tmp_path, az, roles=section["roles"], grants=section["grants"]) as served,
    ):
        async with httpx2.AsyncClient() as http:
            r = await http.post(
                served.url,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                headers={"Accept": "application/json, text/event-stream"},
            )
        status_line, header = block("oauth-challenge").lines()
        assert status_line == f"HTTP/1.1 {r.status_code} {r.reason_phrase}"
        name, _, value = header.partition(": ")
        assert r.headers[name] == value.replace(EXAMPLE_GATEWAY, served.base_url)
        with anyio.fail_after(WAIT):
            tools = await namespace["list_tools"](served.url, az.mint("alice", scope="mcp tool:up__a"))
        assert tools == ["up__a"]
