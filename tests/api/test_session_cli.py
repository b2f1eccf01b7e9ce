"""Sessions and holds from the CLI, without curl (issue 28): ``sessions create|show|grant|revoke|
delete`` and ``holds [create|release]`` against a served gateway, each checked by what an agent
holding the session's token really sees on ``/mcp``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.api.conftest import ALICE, BOB, OPERATOR_TOKEN, served_gateway, upstream_source, write_config
from tests.api.test_cli import cli, cli_all

pytestmark = pytest.mark.anyio


async def _tools(url: str, token: str) -> set[str]:
    async with mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            return {t.name for t in (await client.list_tools()).tools}


async def test_sessions_are_managed_from_the_cli(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, sources=[upstream_source("up", "a", "b", "c")])
    async with served_gateway(cfg) as served:
        env = {"url": served.base_url, "token": OPERATOR_TOKEN}
        made = await cli("sessions", "create", "--owner", "alice", "--policy", "explicit", "--name", "up__a", **env)
        assert made.code == 0, made
        token = re.search(r"^token: (\S+)$", made.out, re.M)
        sid = re.search(r"^created session (\S+) for owner::alice \(explicit, 1 names\)$", made.out, re.M)
        assert token and sid, made.out
        assert "shown once" in made.out
        token_value, session_id = token.group(1), sid.group(1)
        assert await _tools(served.url, token_value) == {"up__a"}

        granted = await cli("sessions", "grant", session_id, "up__b", "up__c", **env)
        assert granted.code == 0 and "up__b, up__c" in granted.out, granted
        # Independent commands run at once (one Python start each dominates the test's time).
        shown, human = await cli_all(
            [(("sessions", "show", session_id, "--json"), env), (("sessions", "show", session_id), env)]
        )
        assert shown.code == 0 and sorted(json.loads(shown.out)["names"]) == ["up__a", "up__b", "up__c"]
        assert "token" not in json.loads(shown.out)  # shown once, at creation only
        assert "policy      explicit" in human.out and "granted     3:" in human.out, human.out

        revoked = await cli("sessions", "revoke", session_id, "up__a", **env)
        assert revoked.code == 0 and revoked.out.strip() == "revoked: up__a", revoked
        assert await _tools(served.url, token_value) == {"up__b", "up__c"}
        not_granted, listed, listed_json, follow = await cli_all(
            [
                (("sessions", "revoke", session_id, "up__a"), env),
                (("sessions",), env),
                (("sessions", "list", "--json"), env),
                (("sessions", "create", "--policy", "follow", "--source", "up", "--json"), env),
            ]
        )
        assert not_granted.code == 1 and "not granted" in not_granted.err, not_granted
        assert session_id in listed.out and "explicit" in listed.out
        assert session_id in {s["id"] for s in json.loads(listed_json.out)}

        body = json.loads(follow.out)
        assert follow.code == 0 and body["token"] and body["grant_policy"] == "follow"
        refused, deleted = await cli_all(
            [(("sessions", "revoke", body["id"], "up__a"), env), (("sessions", "delete", session_id), env)]
        )
        assert refused.code == 1 and "standing grant" in refused.err, refused
        assert deleted.code == 0 and f"deleted session {session_id}" in deleted.out
        async with httpx2.AsyncClient() as http:
            res = await http.post(
                served.url,
                headers={"Authorization": f"Bearer {token_value}", "Accept": "application/json, text/event-stream"},
                json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            )
        assert res.status_code == 401  # the token stopped working at once
        gone = await cli("sessions", "show", session_id, **env)
        assert gone.code == 1


async def test_holds_from_the_cli(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        env = {"url": served.base_url, "token": OPERATOR_TOKEN}
        revision = served.gateway.rec.runtime.current_revision
        made = await cli("holds", "create", str(revision), "--ttl", "120", "--json", **env)
        assert made.code == 0, made
        hold = json.loads(made.out)
        assert hold["revision"] == revision
        listed, as_json = await cli_all([(("holds",), env), (("holds", "list", "--json"), env)])
        assert hold["id"] in listed.out and "current" in listed.out, listed.out
        assert [h["id"] for h in json.loads(as_json.out)] == [hold["id"]]
        released = await cli("holds", "release", hold["id"], **env)
        assert released.code == 0 and hold["id"] in released.out
        assert json.loads((await cli("holds", "--json", **env)).out) == []


async def test_revoke_over_the_api_is_all_or_nothing_and_scoped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POST /v1/sessions/{id}/revoke``: an owner revokes only in their own sessions (another
    owner's is "not found"), a name not granted refuses the whole batch (422, nothing revoked),
    a standing grant (follow) refuses (422), a session declared in the config is changed there (409)."""
    monkeypatch.setenv("DECLARED_TOKEN", "declared-token-0123456789")
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(
        json.dumps(
            {
                "gateway": {"cooldown_s": 0.05},
                "sources": [upstream_source("up", "a", "b")],
                "sessions": [{"name": "ci", "token": "${DECLARED_TOKEN}", "grant_policy": "current"}],
            }
        )
    )
    async with served_gateway(cfg) as served:
        async with httpx2.AsyncClient(base_url=served.base_url) as http:

            async def post(path: str, token: str, body: dict[str, object]) -> httpx2.Response:
                return await http.post(path, json=body, headers={"Authorization": f"Bearer {token}"})

            made = await post("/v1/sessions", ALICE, {"grant_policy": "explicit", "names": ["up__a", "up__b"]})
            assert made.status_code == 201, made.text
            sid = made.json()["id"]
            foreign = await post(f"/v1/sessions/{sid}/revoke", BOB, {"names": ["up__a"]})
            assert foreign.status_code == 404
            partial = await post(f"/v1/sessions/{sid}/revoke", ALICE, {"names": ["up__a", "up__zzz"]})
            assert partial.status_code == 422 and "nothing was revoked" in partial.json()["error"]["message"]
            session = served.gateway.engine.sessions.get(sid)
            assert session is not None and len(session.grants) == 2
            ok = await post(f"/v1/sessions/{sid}/revoke", ALICE, {"names": ["up__a"]})
            assert ok.status_code == 200 and ok.json() == {"removed": ["up__a"]}
            assert sorted(session.grants) == ["tool:up__b"]

            follow = await post("/v1/sessions", ALICE, {"grant_policy": "follow"})
            refused = await post(f"/v1/sessions/{follow.json()['id']}/revoke", ALICE, {"names": ["up__a"]})
            assert refused.status_code == 422 and "standing grant" in refused.json()["error"]["message"]

            declared = next(s for s in served.gateway.engine.sessions.sessions() if s.declared == "ci")
            conflict = await post(f"/v1/sessions/{declared.id}/revoke", OPERATOR_TOKEN, {"names": ["up__a"]})
            assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "declared_session"
