"""Grants are access control (I16): ``/mcp`` over HTTP needs a valid session credential unless
the config opens anonymous access on purpose; a 2025-11-25 transport session stays bound to the
identity that opened it; sessions declared in the config follow its reloads; ``/mcp`` and
``/v1`` share the Host/Origin (DNS-rebinding) check; the built-in control tools need the
operator's say-so and never show config paths to a session (I12).

Raw HTTP (``tests/support/raw_mcp.py``) where the status code, the challenge or the transport
session id is the point; the SDK client elsewhere, in both protocol eras."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from mcp_reconciler.api.auth import Authenticator
from mcp_reconciler.sdk import Conflict, Forbidden, ReconcilerClient
from tests.api.conftest import (
    ALICE,
    OPERATOR_TOKEN,
    WAIT,
    Changes,
    assert_error_shape,
    backdate,
    call_error,
    leaves,
    mcp_client,
    refused,
    served_gateway,
    tool_names,
    upstream_source,
    write_config,
)
from tests.support.raw_mcp import ACCEPT, LEGACY, MODERN, legacy_open, legacy_request, rpc
from tests.support.raw_mcp import tool_names as raw_tool_names
from tests.support.waits import until

pytestmark = pytest.mark.anyio

ERAS = ("legacy", "auto")


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _challenge(response: httpx2.Response) -> str:
    return response.headers.get("www-authenticate", "")


# -- item 1: no credential, no names --------------------------------------------------------------


async def test_I16_no_credential_is_401_with_a_bearer_challenge_in_both_eras(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        authority = served.gateway.engine.sessions
        async with httpx2.AsyncClient() as http:
            # Legacy initialize, a new-era request (by its protocol header), the GET stream, DELETE.
            init = rpc("initialize", {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "x"}})
            attempts = [
                http.post(served.url, json=init, headers=ACCEPT),
                http.post(served.url, json=rpc("tools/list", {}), headers={**ACCEPT, "mcp-protocol-version": MODERN}),
                http.get(served.url, headers={"Accept": "text/event-stream"}),
                http.delete(served.url, headers={"mcp-session-id": "whatever"}),
            ]
            for attempt in attempts:
                r = await attempt
                assert r.status_code == 401, r.text
                assert _challenge(r) == "Bearer"  # RFC 6750 §3.1: no error code without a credential
                assert r.json()["error"] == "invalid_request" and "mcp-session-id" not in r.headers
        for mode in ERAS:
            await refused(served, mode, {})
        # Refused before the SDK: no transport session, no gateway session, no binding was created.
        assert authority.sessions() == [] and not served.front.bindings


async def test_I16_invalid_and_deleted_tokens_are_401_invalid_token_in_both_eras(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            s = await rc.create_session(grant_policy="explicit", names=["up__a"])
            for mode in ERAS:
                async with mcp_client(served, mode=mode, headers=_bearer(s.token)) as mcp:
                    assert await tool_names(mcp) == {"up__a"}
            await rc.delete_session(s.id)
            async with httpx2.AsyncClient() as http:
                # A wrong token, a control-API token (no session token), a deleted session's token,
                # and credentials that are not bearer tokens at all.
                for authorization in (
                    "Bearer not-a-session-token",
                    f"Bearer {OPERATOR_TOKEN}",
                    f"Bearer {s.token}",
                    f"Basic {s.token}",
                    "Bearer",
                ):
                    for protocol in ({}, {"mcp-protocol-version": MODERN}):
                        r = await http.post(
                            served.url,
                            json=rpc("tools/list", {}),
                            headers={**ACCEPT, **protocol, "Authorization": authorization},
                        )
                        assert r.status_code == 401, (authorization, r.text)
                        assert 'error="invalid_token"' in _challenge(r) and _challenge(r).startswith("Bearer ")
                        assert r.json()["error"] == "invalid_token"
                        assert s.token not in r.text and OPERATOR_TOKEN not in r.text  # nothing echoed (I12)
            for mode in ERAS:
                await refused(served, mode, _bearer(s.token))


@pytest.mark.parametrize("mode", ERAS)
async def test_I16_a_deleted_session_is_cut_off_mid_connection(mode: str, tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            s = await rc.create_session(grant_policy="explicit", names=["up__a"])
            cut_off = False
            try:
                with anyio.fail_after(WAIT):
                    async with mcp_client(served, mode=mode, headers=_bearer(s.token)) as mcp:
                        assert await tool_names(mcp) == {"up__a"}
                        await rc.delete_session(s.id)
                        assert not any(b.session.id == s.id for b in served.front.bindings.values())
                        cut_off = True
                        await mcp.list_tools(cache_mode="bypass")  # 401: never another view
            except Exception as exc:  # the SDK wraps the 401 in exception groups
                assert cut_off and not leaves(exc, AssertionError | TimeoutError), exc
            else:
                raise AssertionError("the deleted session's token still worked")


# -- item 2: a legacy transport session is bound to the identity that opened it ------------------


async def test_I16_a_legacy_session_cannot_switch_identity(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, gateway={"anonymous": {"grant_policy": "none"}})
    async with served_gateway(cfg) as served:
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc, httpx2.AsyncClient() as http:
            a = await rc.create_session(grant_policy="explicit", names=["up__a"])
            b = await rc.create_session(grant_policy="explicit", names=["up__b"])

            opened = await legacy_open(http, served.url, _bearer(a.token))
            sid_a = opened.headers["mcp-session-id"]
            ok = await legacy_request(http, served.url, sid_a, "tools/list", headers=_bearer(a.token))
            assert raw_tool_names(ok) == {"up__a"}

            # A → B, A → no credential: that session does not exist for them (404), and neither
            # identity's view is served.
            for headers in (_bearer(b.token), {}):
                r = await legacy_request(http, served.url, sid_a, "tools/list", headers=headers)
                assert r.status_code == 404, (headers, r.text)
                assert "up__a" not in r.text and "up__b" not in r.text

            # none → A: a session opened anonymously does not become A's.
            anon = await legacy_open(http, served.url)
            sid_anon = anon.headers["mcp-session-id"]
            assert raw_tool_names(await legacy_request(http, served.url, sid_anon, "tools/list")) == set()
            r = await legacy_request(http, served.url, sid_anon, "tools/list", headers=_bearer(a.token))
            assert r.status_code == 404 and "up__a" not in r.text

            # Their own identities still work on their own sessions.
            again = await legacy_request(http, served.url, sid_a, "tools/list", headers=_bearer(a.token))
            assert raw_tool_names(again) == {"up__a"}
            assert raw_tool_names(await legacy_request(http, served.url, sid_anon, "tools/list")) == set()
            await http.delete(served.url, headers={**_bearer(a.token), "mcp-session-id": sid_a})
            await http.delete(served.url, headers={"mcp-session-id": sid_anon})


# -- anonymous access only on purpose, with its own policy ----------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_I16_anonymous_access_has_its_own_grant_policy(
    mode: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sources = [upstream_source("up", "a", "b"), upstream_source("other", "x")]
    cfg = write_config(tmp_path, sources=sources, gateway={"anonymous": {"grant_policy": "follow", "sources": ["up"]}})
    with caplog.at_level(logging.WARNING, logger="mcp_reconciler.server"):
        async with served_gateway(cfg) as served:
            async with mcp_client(served, mode=mode, credential=False) as anon:
                names = await tool_names(anon)
                assert {"up__a", "up__b"} <= names and not any(n.startswith("other__") for n in names)
            # Turned off by a config reload: refused at once.
            write_config(tmp_path, sources=sources)
            await served.gateway.engine.refresh()
            await refused(served, mode, {})
    assert any("anonymous access to /mcp is ON" in r.getMessage() for r in caplog.records)
    assert any("anonymous access to /mcp is now OFF" in r.getMessage() for r in caplog.records)


# -- sessions declared in the config ------------------------------------------------------------


async def test_config_declared_sessions_follow_config_reloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = "ci-token-0123456789abcdef", "ci-token-rotated-0123456789"
    monkeypatch.setenv("CI_SESSION_TOKEN", first)
    session = {"name": "ci", "token": "${CI_SESSION_TOKEN}", "grant_policy": "explicit", "names": ["up__a"]}
    cfg = write_config(tmp_path)
    doc = json.loads(cfg.read_text())

    def rewrite(sessions: list[dict[str, Any]]) -> None:
        cfg.write_text(json.dumps({**doc, "sessions": sessions}))
        backdate(cfg)

    rewrite([session])
    caplog.set_level(logging.DEBUG)
    async with served_gateway(cfg) as served:
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            (out,) = await rc.sessions()
            assert out.id == "cfg-ci" and out.owner == "config::ci" and out.declared and out.names == ["up__a"]
            with pytest.raises(Conflict):
                await rc.delete_session(out.id)  # declared in the config: change it there
            changes = Changes()
            async with mcp_client(served, mode="legacy", headers=_bearer(first), message_handler=changes) as mcp:
                assert await tool_names(mcp) == {"up__a"}
                await until(
                    lambda: any(b.session.id == "cfg-ci" and b.last_view for b in served.front.bindings.values()),
                    what="the binding's first view",
                )

                # The declaration changes: the reload re-applies its grants; the session is told.
                rewrite([{**session, "names": ["up__a", "up__b"]}])
                await rc.refresh()
                await changes.wait_tools(1)
                assert await tool_names(mcp) == {"up__a", "up__b"}

                # The token rotates: the old one stops working, the new one is the same session.
                monkeypatch.setenv("CI_SESSION_TOKEN", second)
                rewrite([{**session, "names": ["up__a", "up__b"]}])
                await rc.refresh()
            assert (await refused(served, "auto", _bearer(first))) is not None
            async with mcp_client(served, headers=_bearer(second)) as mcp:
                assert await tool_names(mcp) == {"up__a", "up__b"}

            # Removed from the config: gone, and its token with it.
            rewrite([])
            await rc.refresh()
            assert await rc.sessions() == []
            await refused(served, "auto", _bearer(second))
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert first not in logged and second not in logged  # a declared token is never logged


async def test_config_declared_session_with_an_unset_token_variable_is_a_config_error(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    doc = json.loads(cfg.read_text())
    doc["sessions"] = [{"name": "ci", "token": "${NOT_SET_ANYWHERE_123}", "grant_policy": "none"}]
    cfg.write_text(json.dumps(doc))
    from mcp_reconciler.reconciler.config import check_config

    (problem,) = check_config(cfg, environ={})
    assert problem.field == "sessions[0].token" and "NOT_SET_ANYWHERE_123 is not set" in problem.message


# -- /v1 gets the same Host/Origin protection as /mcp ----------------------------------------------


@pytest.mark.parametrize("insecure", [False, True])
async def test_v1_and_mcp_refuse_a_foreign_host_or_origin(insecure: bool, tmp_path: Path) -> None:
    kw: dict[str, Any] = {"authenticator": Authenticator(insecure_no_auth=True)} if insecure else {}
    async with served_gateway(write_config(tmp_path), **kw) as served:
        port = served.port
        auth = {} if insecure else _bearer(OPERATOR_TOKEN)
        async with httpx2.AsyncClient(base_url=served.base_url) as http:
            for method, path in (("GET", "/v1/status"), ("POST", "/v1/sessions"), ("POST", "/v1/refresh")):
                r = await http.request(method, path, headers={**auth, "Host": f"evil.example:{port}"}, json={})
                assert r.status_code == 421, r.text
                assert_error_shape(r.json()) and r.json()["error"]["code"] == "invalid_host"
                r = await http.request(method, path, headers={**auth, "Origin": "http://evil.example"}, json={})
                assert r.status_code == 403, r.text
                assert r.json()["error"]["code"] == "invalid_origin"
            assert served.gateway.engine.sessions.sessions() == []  # nothing was created
            # The allowed ones pass, and probes are not checked.
            ok = await http.get("/v1/status", headers={**auth, "Origin": f"http://localhost:{port}"})
            assert ok.status_code == 200
            assert (await http.get("/healthz", headers={"Host": "lb.internal"})).status_code == 200
            # /mcp: the same lists, checked before credentials.
            r = await http.post("/mcp", json=rpc("tools/list", {}), headers={**ACCEPT, "Host": f"evil.example:{port}"})
            assert r.status_code == 421
            r = await http.post("/mcp", json=rpc("tools/list", {}), headers={**ACCEPT, "Origin": "http://evil.example"})
            assert r.status_code == 403


# -- item 9: control tools need the operator's say-so; owners see no config paths ---------------


async def test_control_tools_need_the_flag_and_a_session_sees_no_config_paths(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, gateway={"expose_control_tools": True})
    doc = json.loads(cfg.read_text())
    doc["sources"][0]["watch"] = ["inputs/*.never"]  # a glob matching nothing: a warning naming a path
    cfg.write_text(json.dumps(doc))
    async with served_gateway(cfg) as served:
        async with (
            ReconcilerClient(served.base_url, OPERATOR_TOKEN) as op,
            ReconcilerClient(served.base_url, ALICE) as alice,
        ):
            full = await op.status()
            assert full.warnings and any(str(tmp_path) in w for w in full.warnings)

            # Owners: no config paths in status (I12), and they cannot hand out the control tools.
            seen = await alice.status()
            assert seen.warnings and not any(str(tmp_path) in w for w in seen.warnings)
            with pytest.raises(Forbidden):
                await alice.create_session(control_tools=True)

            plain = await op.create_session()
            flagged = await op.create_session(control_tools=True)
            for mode in ERAS:
                async with mcp_client(served, mode=mode, headers=_bearer(plain.token)) as mcp:
                    assert "gateway_status" not in await tool_names(mcp)
                    err = await call_error(mcp, "gateway_status")
                    assert err.code == -32602  # like any name it may not use: unknown
                    assert (await call_error(mcp, "gateway_refresh")).code == -32602
                async with mcp_client(served, mode=mode, headers=_bearer(flagged.token)) as mcp:
                    assert {"gateway_status", "gateway_refresh"} <= await tool_names(mcp)
                    result = await mcp.call_tool("gateway_status", {})
                    text = result.content[0].text  # type: ignore[union-attr]
                    body = json.loads(text)
                    assert body["revision"] == full.revision and body["warnings"]
                    assert str(tmp_path) not in text and "gateway.yaml" not in text

            # An invalid edit: operators read config_error, sessions and owners only the condition.
            cfg.write_text("sources: [\n")
            backdate(cfg)
            await op.refresh()
            assert (await op.status()).config_error
            owner_view = await alice.status()
            assert owner_view.config_error is None and owner_view.state == "error"
            assert [c.type for c in owner_view.conditions] == ["config_invalid"]
            async with mcp_client(served, headers=_bearer(flagged.token)) as mcp:
                text = (await mcp.call_tool("gateway_status", {})).content[0].text  # type: ignore[union-attr]
                assert json.loads(text)["config_error"] is None and str(tmp_path) not in text
