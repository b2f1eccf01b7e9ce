"""The control API's auth matrix: bearer tokens, roles (operator, session owner), and the
error bodies they produce ({"error": {"code", "message"}}, never any token text — I12)."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from mcp_reconciler.api.auth import Authenticator
from mcp_reconciler.api.routes import ROUTES
from mcp_reconciler.sdk import Forbidden, NotFound, ReconcilerClient, Unauthenticated, wire
from tests.api.conftest import (
    ALICE,
    ALL_TOKENS,
    BOB,
    OPERATOR_TOKEN,
    assert_error_shape,
    served_gateway,
    write_config,
)

pytestmark = pytest.mark.anyio


def _concrete(path: str) -> str:
    return path.replace("{name}", "up").replace("{id}", "x1").replace("{n}", "1")


async def test_no_token_and_wrong_token_are_401_on_every_route(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        session = served.front.authority.create("owner::alice", None)  # its MCP token is no control-API token
        bad_headers: list[dict[str, str]] = [
            {},
            {"Authorization": "Bearer wrong-token"},
            {"Authorization": f"Bearer {OPERATOR_TOKEN}x"},
            {"Authorization": f"Basic {OPERATOR_TOKEN}"},
            {"Authorization": OPERATOR_TOKEN},
            {"Authorization": "Bearer"},
            {"Authorization": f"Bearer {session.token}"},
        ]
        async with httpx2.AsyncClient(base_url=served.base_url) as http:
            for spec in ROUTES:
                for headers in bad_headers:
                    r = await http.request(spec.method, _concrete(spec.path), headers=headers, json={})
                    assert r.status_code == 401, (spec.method, spec.path, headers, r.text)
                    body = r.json()
                    assert_error_shape(body, forbidden=(*ALL_TOKENS, session.token))
                    assert body["error"]["code"] == "unauthenticated"
            # Case-insensitive scheme, surrounding whitespace tolerated.
            r = await http.get("/v1/status", headers={"Authorization": f"bearer  {OPERATOR_TOKEN}"})
            assert r.status_code == 200
            # Health and readiness need no token.
            assert (await http.get("/healthz")).status_code == 200
            assert (await http.get("/readyz")).status_code == 200

        for token in (None, "wrong-token"):
            async with ReconcilerClient(served.base_url, token) as rc:
                with pytest.raises(Unauthenticated) as exc:
                    await rc.status()
                assert exc.value.status == 401 and exc.value.code == "unauthenticated"
                assert OPERATOR_TOKEN not in str(exc.value)


async def test_owners_see_only_their_own_sessions(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        async with (
            ReconcilerClient(served.base_url, ALICE) as alice,
            ReconcilerClient(served.base_url, BOB) as bob,
            ReconcilerClient(served.base_url, OPERATOR_TOKEN) as op,
        ):
            a = await alice.create_session(grant_policy="none", owner="bob")  # owners cannot choose the owner
            assert a.owner == "owner::alice"  # role-qualified principal ids (issue 10, item 3)
            b = await bob.create_session(grant_policy="none")
            assert b.owner == "owner::bob"

            assert [s.id for s in await alice.sessions()] == [a.id]
            assert [s.id for s in await bob.sessions()] == [b.id]
            assert {s.id for s in await op.sessions()} == {a.id, b.id}

            # Another owner's session is "not found" — never "forbidden", so ids do not leak.
            for call in (
                lambda: alice.session(b.id),
                lambda: alice.delete_session(b.id),
                lambda: alice.grant(b.id, ["up__a"]),
                lambda: alice.refresh_session(b.id),
            ):
                with pytest.raises(NotFound) as nf:
                    await call()
                assert nf.value.code == "not_found"
            unknown = await _raw(served.base_url, ALICE, "GET", "/v1/sessions/s0-does-not-exist")
            foreign = await _raw(served.base_url, ALICE, "GET", f"/v1/sessions/{b.id}")
            assert unknown.status_code == foreign.status_code == 404
            assert unknown.json() == foreign.json()  # indistinguishable
            assert_error_shape(foreign.json())
            assert (await bob.session(b.id)).granted == 0  # alice's grant did nothing

            # Their own: everything works.
            assert (await alice.grant(a.id, ["up__a"])).added == ["up__a"]
            assert "up__b" in (await alice.refresh_session(a.id)).added
            await alice.delete_session(a.id)
            assert await alice.sessions() == []

            # Holds: an owner may hold a revision; another owner cannot release it; an operator can.
            rev = (await alice.status()).revision
            assert rev is not None
            hold = await alice.hold(rev, ttl_s=30)
            assert hold.owner == "owner::alice"
            with pytest.raises(NotFound):
                await bob.release_hold(hold.id)
            await op.release_hold(hold.id)
            hold2 = await alice.hold(rev, ttl_s=30)
            await alice.release_hold(hold2.id)

            # Operators act on anyone's session, and may create sessions for an owner.
            await op.grant(b.id, ["up__a"])
            assert (await bob.session(b.id)).names == ["up__a"]
            for_alice = await op.create_session(owner="alice", grant_policy="none")
            assert for_alice.owner == "owner::alice"
            assert [s.id for s in await alice.sessions()] == [for_alice.id]
            await op.delete_session(b.id)
            assert await bob.sessions() == []


async def test_an_owner_named_like_an_operator_cannot_touch_operator_resources(tmp_path: Path) -> None:
    # Operators are named operator1, operator2, ...; an owner may be given the same name.
    impostor_token = "impostor-token-0123456789"
    auth = Authenticator([OPERATOR_TOKEN], {"operator1": impostor_token})
    async with served_gateway(write_config(tmp_path), authenticator=auth) as served:
        async with (
            ReconcilerClient(served.base_url, OPERATOR_TOKEN) as op,
            ReconcilerClient(served.base_url, impostor_token) as impostor,
        ):
            mine = await op.create_session(grant_policy="none")  # the operator's own session
            assert mine.owner == "operator::operator1"
            rev = (await op.status()).revision
            assert rev is not None
            hold = await op.hold(rev, ttl_s=30)
            assert hold.owner == "operator::operator1"

            assert await impostor.sessions() == []  # none of the operator's sessions are "its own"
            for call in (
                lambda: impostor.session(mine.id),
                lambda: impostor.grant(mine.id, ["up__a"]),
                lambda: impostor.refresh_session(mine.id),
                lambda: impostor.delete_session(mine.id),
                lambda: impostor.release_hold(hold.id),
            ):
                with pytest.raises(NotFound):
                    await call()
            assert (await op.session(mine.id)).granted == 0 and (await op.status()).holds == 1

            # Its own resources carry its own role: owner::operator1, never operator::operator1.
            own = await impostor.create_session(grant_policy="none")
            assert own.owner == "owner::operator1"
            assert [s.id for s in await impostor.sessions()] == [own.id]
            own_hold = await impostor.hold(rev, ttl_s=30)
            assert own_hold.owner == "owner::operator1"
            await op.release_hold(hold.id)
            await impostor.release_hold(own_hold.id)


async def test_owner_on_operator_only_endpoint_is_403(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        async with ReconcilerClient(served.base_url, ALICE) as alice:
            with pytest.raises(Forbidden) as exc:
                await alice.refresh()
            assert exc.value.status == 403 and exc.value.code == "forbidden"
            with pytest.raises(Forbidden):
                await alice.refresh(wait=False)
            # Read-only endpoints are open to owners.
            st = await alice.status()
            assert st.state == "ready"
            assert (await alice.generations()).current == st.revision
            assert (await alice.catalog()).revision == st.revision
            assert [s.name for s in await alice.sources()] == ["up"]
            assert (await alice.source("up")).name == "up"
        r = await _raw(served.base_url, ALICE, "POST", "/v1/refresh", json={"wait": False})
        assert r.status_code == 403
        assert_error_shape(r.json())


async def test_insecure_no_auth_is_operator(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path), authenticator=Authenticator(insecure_no_auth=True)) as served:
        async with ReconcilerClient(served.base_url) as rc:
            out = await rc.refresh()
            assert isinstance(out, wire.RefreshOut)
            s = await rc.create_session(owner="alice")
            assert s.owner == "owner::alice"
            assert [x.id for x in await rc.sessions()] == [s.id]
            await rc.delete_session(s.id)
        async with ReconcilerClient(served.base_url, "whatever") as rc:
            assert (await rc.status()).state == "ready"


async def test_no_tokens_configured_answers_401(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path), authenticator=Authenticator()) as served:
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            with pytest.raises(Unauthenticated):
                await rc.status()


def test_tokens_from_env() -> None:
    auth = Authenticator.from_env(
        {
            "MCP_RECONCILER_OPERATOR_TOKENS": " op1 , ,op2",
            "MCP_RECONCILER_OWNER_TOKENS": "alice=t-a, bob = t-b ,broken,=nobody,carol=",
        }
    )
    assert auth.authenticate("Bearer op1") == auth.authenticate("Bearer op1")
    op1, op2 = auth.authenticate("Bearer op1"), auth.authenticate("Bearer op2")
    assert op1 is not None and op2 is not None and op1.role == op2.role == "operator" and op1 != op2
    alice, bob = auth.authenticate("Bearer t-a"), auth.authenticate("Bearer t-b")
    assert alice is not None and (alice.role, alice.name) == ("owner", "alice")
    assert bob is not None and (bob.role, bob.name) == ("owner", "bob")
    for bad in (None, "", "Bearer", "Bearer broken", "Bearer nobody", "Bearer ", "t-a"):
        assert auth.authenticate(bad) is None, bad
    assert not Authenticator.from_env({}).configured


async def _raw(base_url: str, token: str, method: str, path: str, **kw: object) -> httpx2.Response:
    async with httpx2.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {token}"}) as http:
        return await http.request(method, path, **kw)  # type: ignore[arg-type]


def test_principal_ids_are_the_oauth_identitys_owner_keys() -> None:
    # One principal id scheme for every credential (issue 10, item 3; issue 14): a static
    # principal's id is what the OAuth identity model calls its owner key.
    from mcp_reconciler.api.auth import Principal
    from mcp_reconciler.api.oauth.identity import Identity

    for principal in (Principal("owner", "operator1"), Principal("operator", "operator1"), Principal("owner", "a")):
        assert principal.id == Identity.from_principal(principal).owner_key
    assert Principal("owner", "operator1").id != Principal("operator", "operator1").id
