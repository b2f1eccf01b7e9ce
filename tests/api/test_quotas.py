"""Quotas on the control API (ADR 0032, I25) on a real gateway on 127.0.0.1: sessions, grants per
session, revision holds and event streams are bounded per principal and in total, with the last
slots kept for operators — each at N and N+1, across two owners and the operator. A refusal is
429 naming the bound (its config key) and its value; another principal keeps what it needs."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.api.conftest import (
    ALICE,
    BOB,
    OPERATOR_TOKEN,
    WAIT,
    assert_error_shape,
    served_gateway,
    upstream_source,
    write_config,
)
from tests.api.test_events import follow

pytestmark = pytest.mark.anyio


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _refused(r: httpx2.Response, code: str, bound: str, limit: int) -> None:
    """``r`` is the 429 of the quota ``bound`` (config key under gateway.limits) at ``limit``."""
    assert r.status_code == 429, r.text
    body = r.json()
    assert_error_shape(body)
    error = body["error"]
    assert (error["code"], error["bound"], error["limit"]) == (code, f"gateway.limits.{bound}", limit), error
    assert f"gateway.limits.{bound}" in error["message"]


async def test_I25_sessions_are_bounded_per_principal_and_in_total_with_an_operator_reserve(tmp_path: Path) -> None:
    # 5 in total, 2 per principal, the last 1 for operators: owners together stop at 4.
    limits = {"sessions": 5, "sessions_per_principal": 2, "sessions_operator_reserve": 1}
    async with served_gateway(write_config(tmp_path, gateway={"limits": limits})) as served:
        async with httpx2.AsyncClient(base_url=served.base_url, timeout=WAIT) as http:

            async def create(token: str, **body: Any) -> httpx2.Response:
                return await http.post("/v1/sessions", json=body, headers=_auth(token))

            alice = [await create(ALICE) for _ in range(2)]  # N per principal: accepted
            assert [r.status_code for r in alice] == [201, 201]
            _refused(await create(ALICE), "too_many_sessions", "sessions_per_principal", 2)  # N + 1
            assert (await create(BOB)).status_code == 201  # another owner is not affected
            assert (await create(OPERATOR_TOKEN)).status_code == 201  # 4 exist: the owners' room
            # Bob is under his own bound, but owners together have taken all but the reserve.
            _refused(await create(BOB), "too_many_sessions", "sessions_operator_reserve", 1)
            assert (await create(OPERATOR_TOKEN)).status_code == 201  # the reserve: N = 5 in total
            _refused(await create(OPERATOR_TOKEN), "too_many_sessions", "sessions", 5)  # N + 1 in total
            # An operator may use the reserve for an owner, and the session counts against that
            # owner's own bound.
            await http.delete(f"/v1/sessions/{alice[0].json()['id']}", headers=_auth(ALICE))  # 4 left
            _refused(await create(BOB), "too_many_sessions", "sessions_operator_reserve", 1)
            assert (await create(OPERATOR_TOKEN, owner="bob")).status_code == 201  # bob: 2 = N
            await http.delete(f"/v1/sessions/{alice[1].json()['id']}", headers=_auth(ALICE))  # 4 left
            _refused(await create(OPERATOR_TOKEN, owner="bob"), "too_many_sessions", "sessions_per_principal", 2)
            owners = sorted(s.owner for s in served.gateway.engine.sessions.sessions())
            assert owners == ["operator::operator1", "operator::operator1", "owner::bob", "owner::bob"]


async def test_I25_an_operator_has_a_per_principal_bound_too(tmp_path: Path) -> None:
    limits = {"sessions": 50, "sessions_per_principal": 3, "sessions_operator_reserve": 10}
    async with served_gateway(write_config(tmp_path, gateway={"limits": limits})) as served:
        async with httpx2.AsyncClient(base_url=served.base_url, timeout=WAIT) as http:
            for _ in range(3):  # N
                assert (await http.post("/v1/sessions", headers=_auth(OPERATOR_TOKEN))).status_code == 201
            r = await http.post("/v1/sessions", headers=_auth(OPERATOR_TOKEN))  # N + 1
            _refused(r, "too_many_sessions", "sessions_per_principal", 3)
            assert (await http.post("/v1/sessions", headers=_auth(ALICE))).status_code == 201


async def test_I25_grants_per_session_are_bounded_at_n_and_n_plus_1(tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path, sources=[upstream_source("up", "a", "b", "c")], gateway={"limits": {"grants_per_session": 2}}
    )
    async with served_gateway(cfg) as served:
        async with httpx2.AsyncClient(base_url=served.base_url, timeout=WAIT) as http:
            # Every visible name (3) would exceed 2: the session is refused, not half-granted.
            r = await http.post("/v1/sessions", json={"grant_policy": "current"}, headers=_auth(ALICE))
            _refused(r, "too_many_grants", "grants_per_session", 2)
            for token in (ALICE, BOB, OPERATOR_TOKEN):
                r = await http.post(
                    "/v1/sessions", json={"grant_policy": "explicit", "names": ["up__a"]}, headers=_auth(token)
                )
                assert r.status_code == 201, r.text
                sid = r.json()["id"]
                grants = f"/v1/sessions/{sid}/grants"
                r = await http.post(grants, json={"names": ["up__b"]}, headers=_auth(token))  # N = 2
                assert r.status_code == 200, r.text
                r = await http.post(grants, json={"names": ["up__c"]}, headers=_auth(token))  # N + 1
                _refused(r, "too_many_grants", "grants_per_session", 2)
                session = await http.get(f"/v1/sessions/{sid}", headers=_auth(token))
                assert session.json()["names"] == ["up__a", "up__b"]  # nothing of the refused grant


async def test_I25_holds_are_bounded_per_principal_and_in_total_with_an_operator_reserve(tmp_path: Path) -> None:
    limits = {"holds": 4, "holds_per_principal": 2, "holds_operator_reserve": 1}
    async with served_gateway(write_config(tmp_path, gateway={"limits": limits})) as served:
        revision = served.gateway.engine.current_revision
        async with httpx2.AsyncClient(base_url=served.base_url, timeout=WAIT) as http:

            async def hold(token: str) -> httpx2.Response:
                return await http.post(f"/v1/revisions/{revision}/holds", json={"ttl_s": 60}, headers=_auth(token))

            alice = [await hold(ALICE) for _ in range(2)]
            assert [r.status_code for r in alice] == [201, 201]  # N per principal
            _refused(await hold(ALICE), "too_many_holds", "holds_per_principal", 2)  # N + 1
            assert (await hold(BOB)).status_code == 201  # 3 held: the owners' room
            _refused(await hold(BOB), "too_many_holds", "holds_operator_reserve", 1)
            assert (await hold(OPERATOR_TOKEN)).status_code == 201  # the reserve: N = 4 in total
            _refused(await hold(OPERATOR_TOKEN), "too_many_holds", "holds", 4)  # N + 1 in total
            for released in alice:  # 2 left: the owners' room has a slot again
                assert (
                    await http.delete(f"/v1/holds/{released.json()['id']}", headers=_auth(ALICE))
                ).status_code == 204
            assert (await hold(BOB)).status_code == 201


async def test_I25_event_streams_are_bounded_per_principal_and_in_total_with_an_operator_reserve(
    tmp_path: Path,
) -> None:
    limits = {"event_streams": 4, "event_streams_per_principal": 2, "event_streams_operator_reserve": 1}
    async with served_gateway(write_config(tmp_path, gateway={"limits": limits})) as served:
        async with AsyncExitStack() as stack, httpx2.AsyncClient(base_url=served.base_url, timeout=WAIT) as http:

            async def refused(token: str) -> httpx2.Response:
                # Streamed: a stream that is (wrongly) accepted fails the test instead of hanging it.
                async with http.stream("GET", "/v1/events", headers=_auth(token)) as r:
                    assert r.status_code == 429, "the stream was accepted"
                    await r.aread()
                    return r

            for _ in range(2):  # N per principal
                await stack.enter_async_context(follow(served, ALICE))
            _refused(await refused(ALICE), "too_many_streams", "event_streams_per_principal", 2)  # N + 1
            await stack.enter_async_context(follow(served, BOB))  # 3 open: the owners' room
            _refused(await refused(BOB), "too_many_streams", "event_streams_operator_reserve", 1)
            await stack.enter_async_context(follow(served, OPERATOR_TOKEN))  # the reserve: N = 4
            _refused(await refused(OPERATOR_TOKEN), "too_many_streams", "event_streams", 4)  # N + 1 in total
            assert served.control is not None and served.control.events.clients == 4


async def test_I25_a_reserve_as_large_as_its_total_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    from mcp_reconciler.reconciler.config import load_config
    from mcp_reconciler.reconciler.config.problems import ConfigError

    cfg = write_config(tmp_path, gateway={"limits": {"holds": 4, "holds_operator_reserve": 4}})
    with pytest.raises(ConfigError) as refused:
        load_config(cfg)
    assert "holds_operator_reserve" in str(refused.value) and str(cfg) in str(refused.value)
