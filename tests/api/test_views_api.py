"""Named views on the control API, in config-declared sessions and for OAuth subjects (issue 27,
ADR 0026): a session created for a view with ``POST /v1/sessions``, declared with ``view:`` or
opened by an access token on ``/mcp/<view>`` sees and calls only its view's names; ``/v1/status``
lists the views with their entry counts; ``check-config`` names them and reports a bad glob with
``file:line``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.api.check_config import run
from mcp_reconciler.api.server import serve_http
from mcp_reconciler.sdk import ReconcilerClient
from mcp_reconciler.sdk.errors import InvalidRequest
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.api.conftest import (
    OPERATOR_TOKEN,
    authenticator,
    backdate,
    served_gateway,
    tool_names,
    upstream_source,
    write_config,
)
from tests.api.test_oauth_gateway import gateway_config
from tests.support.authz_server import authz_server
from tests.support.calls import call_error
from tests.support.ports import listening_socket

pytestmark = pytest.mark.anyio


def config(tmp_path: Path) -> Path:
    cfg = write_config(tmp_path, sources=[upstream_source("up", "a", "b"), upstream_source("other", "x")])
    doc = json.loads(cfg.read_text())
    doc["sources"][0]["tools"] = {"allow": ["a", "b"]}
    doc["sources"][1]["tools"] = {"allow": ["x"]}
    doc["views"] = [
        {"name": "ops", "sources": ["up"], "rename": {"up__a": "alpha"}},
        {"name": "other", "sources": ["other"]},
    ]
    doc["sessions"] = [
        {"name": "bot", "token": "bot-token-0123456789abcdef", "grant_policy": "follow", "view": "other"},
    ]
    cfg.write_text(json.dumps(doc))
    return cfg


async def test_sessions_for_a_view_over_the_api_and_the_config(tmp_path: Path) -> None:
    async with served_gateway(config(tmp_path)) as served:
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            status = await rc.status()
            assert [(v.name, v.entries, v.tools) for v in status.views] == [("ops", 2, 2), ("other", 1, 1)]
            created = await rc.create_session(view="ops")
            assert created.view == "ops" and sorted(created.names) == ["alpha", "up__b"]
            with pytest.raises(InvalidRequest) as info:
                await rc.create_session(view="nope")
            assert info.value.code == "unknown_view"
            declared = {s.id: s for s in await rc.sessions()}["cfg-bot"]
            assert declared.view == "other" and declared.names == ["other__x"]

        for token, path, expected, foreign in (
            (created.token, "/ops", {"alpha", "up__b"}, "other__x"),
            ("bot-token-0123456789abcdef", "/other", {"other__x"}, "up__b"),
        ):
            async with mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
                async with Client(streamable_http_client(served.url + path, http_client=http), mode="auto") as mcp:
                    assert await tool_names(mcp) == expected
                    error = await call_error(mcp, foreign)
                    assert isinstance(error, MCPError) and "unknown tool" in error.error.message


def test_check_config_names_the_views_and_reports_a_bad_glob_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    cfg = config(tmp_path)
    assert run(str(cfg)) == 0
    assert "2 source(s): up, other; 2 view(s): ops, other;" in capsys.readouterr().out
    doc = json.loads(cfg.read_text())
    doc["sources"][0]["tools"] = {"deny": ["a["]}
    cfg.write_text(json.dumps(doc))
    assert run(str(cfg)) == 1
    err = capsys.readouterr().err
    assert f"{cfg}:1: sources[0].tools.deny: unclosed '['" in err, err


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_oauth_subject_on_a_view_gets_a_session_bound_to_it(mode: str, tmp_path: Path) -> None:

    up, other = upstream_source("up", "a", "b"), upstream_source("other", "x")
    up["tools"], other["tools"] = {"allow": ["a", "b"]}, {"allow": ["x"]}
    async with authz_server() as az:
        sock = listening_socket()  # bound first: the config names the gateway's own URL
        cfg = gateway_config(tmp_path, sock.getsockname()[1], az, [up, other], grants={"policy": "current"})
        doc = json.loads(cfg.read_text())
        doc["views"] = [{"name": "ops", "sources": ["up"]}]
        cfg.write_text(json.dumps(doc))
        backdate(cfg)
        async with serve_http(cfg, authenticator=authenticator(), listen_socket=sock) as served:
            az.audience = served.url  # the gateway's /mcp resource: the same for every view
            token = az.mint("alice", scope="mcp")
            async with (
                mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
                Client(streamable_http_client(served.url + "/ops", http_client=http), mode=mode) as mcp,
            ):
                assert await tool_names(mcp) == {"up__a", "up__b"}
                assert "unknown tool" in (await call_error(mcp, "other__x")).error.message
                (session,) = [s for s in served.gateway.engine.sessions.sessions() if s.owner.startswith("oauth:")]
                assert session.view == "ops"
