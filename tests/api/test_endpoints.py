"""Every control-API endpoint through a real server on 127.0.0.1, driven by the SDK
(``ReconcilerClient``; ``SyncReconcilerClient`` in a worker thread). Raw HTTP (httpx2) only where
the status code or the exact error body is the point."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import httpx2
import pytest

from mcp_reconciler.reconciler.runtime import LiveState
from mcp_reconciler.sdk import (
    Conflict,
    InvalidRequest,
    NotFound,
    ReconcilerClient,
    SyncReconcilerClient,
    Unreachable,
    wire,
)
from tests.api.conftest import (
    OPERATOR_TOKEN,
    WAIT,
    Publications,
    assert_error_shape,
    backdate,
    mcp_client,
    served_gateway,
    upstream_source,
    write_config,
)
from tests.support.waits import until

pytestmark = pytest.mark.anyio

BASE_TOOLS = {f"up__{n}" for n in ("a", "b", "block", "crash", "flood", "set_tools", "progress")} | {
    "up__fail_protocol",
    "up__fail_result",
}


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


async def test_status_generations_catalog_sources(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        rev = served.gateway.rec.runtime.current_revision
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            st = await rc.status()
            assert st.state == "ready" and st.revision == rev and st.entries == len(BASE_TOOLS)
            assert st.digest and st.built_at and st.published_at and st.config_error is None
            assert [s.name for s in st.sources] == ["up"] and st.sources[0].state == "ready"
            assert st.holds == 0 and st.sessions == 0 and st.retiring == [] and not st.pending_publication
            assert st.reload_mode and st.tracked_files >= 1  # provenance (I11)

            gens = await rc.generations()
            assert gens.current == rev and not gens.pending_publication
            assert [(g.revision, g.state, g.entries) for g in gens.generations] == [(rev, "current", len(BASE_TOOLS))]
            assert gens.generations[0].digest == st.digest

            cat = await rc.catalog()
            assert cat.revision == rev and cat.digest == st.digest
            assert {e.name for e in cat.entries} == BASE_TOOLS
            a = next(e for e in cat.entries if e.name == "up__a")
            assert (a.kind, a.upstream_name, a.source) == ("tool", "a", "up") and len(a.digest) == 64
            assert await rc.catalog(revision=rev) == cat

            with pytest.raises(NotFound) as nf:
                await rc.catalog(revision=rev + 1000)
            assert nf.value.code == "revision_unavailable" and f"the current revision is {rev}" in nf.value.message
            async with httpx2.AsyncClient(base_url=served.base_url, headers=_auth()) as http:
                bad = await http.get("/v1/catalog", params={"revision": "abc"})
                assert bad.status_code == 400
                assert_error_shape(bad.json())
                assert bad.json()["error"]["code"] == "invalid_parameter"

            sources = await rc.sources()
            assert [(s.name, s.state, s.entries) for s in sources] == [("up", "ready", len(BASE_TOOLS))]
            assert await rc.source("up") == sources[0]
            with pytest.raises(NotFound) as nf:
                await rc.source("nope")
            assert nf.value.code == "unknown_source"


async def test_refresh_wait_and_no_wait(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        queue = served.gateway.rec.queue
        rev = served.gateway.rec.runtime.current_revision
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            started = queue.started
            out = await rc.refresh()
            assert isinstance(out, wire.RefreshOut)
            assert out.cycle > started  # I7: a cycle that started after the request
            assert out.cycle_status == "unchanged" and not out.changed and out.revision == rev  # I3
            assert out.status.revision == rev and out.status.state == "ready"

            started = queue.started
            one = await rc.refresh(["up"])
            assert isinstance(one, wire.RefreshOut) and one.cycle > started

            started = queue.started
            accepted = await rc.refresh(wait=False)
            assert isinstance(accepted, wire.RefreshAccepted)  # HTTP 202
            assert accepted.ticket > started and accepted.revision == rev
            # The ticket names the cycle that answers: it runs (bounded wait) without anyone waiting.
            await until(
                lambda: queue.batches_done >= accepted.ticket,
                what="the ticket's cycle to run",
                timeout_s=WAIT,
            )

            with pytest.raises(NotFound) as nf:
                await rc.refresh(["up", "nope"])
            assert nf.value.code == "unknown_source"
            with pytest.raises(InvalidRequest):
                await rc.refresh(timeout_s=301)  # timeout_s is bounded (le=300)

        async with httpx2.AsyncClient(base_url=served.base_url, headers=_auth()) as http:
            raw = await http.post("/v1/refresh", json={"wait": False})
            assert raw.status_code == 202 and set(raw.json()) == {"ticket", "revision"}
            raw = await http.post("/v1/refresh")  # no body: every source, wait
            assert raw.status_code == 200 and raw.json()["cycle_status"] in ("unchanged", "published")
            raw = await http.post("/v1/refresh", content=b"{not json")
            assert raw.status_code == 422
            assert_error_shape(raw.json())
            raw = await http.post("/v1/refresh", json={"bogus": 1})  # extra fields are refused
            assert raw.status_code == 422 and raw.json()["error"]["code"] == "invalid_body"
            raw = await http.post("/v1/refresh", content=b"x" * (256 * 1024 + 1))
            assert raw.status_code == 413
            assert_error_shape(raw.json())


async def test_sessions_crud(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        rev = served.gateway.rec.runtime.current_revision
        assert rev is not None
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            assert await rc.sessions() == []
            s = await rc.create_session()  # policy "current": every name visible now
            assert s.owner == "operator::operator1" and s.token and s.granted == len(BASE_TOOLS)
            assert set(s.names) == BASE_TOOLS and s.pinned_revision is None and s.drifted == []
            none = await rc.create_session(grant_policy="none", owner="alice")
            assert none.owner == "owner::alice" and none.granted == 0 and none.names == []
            explicit = await rc.create_session(grant_policy="explicit", names=["up__a"], revision=rev)
            assert explicit.names == ["up__a"] and explicit.pinned_revision == rev

            listed = await rc.sessions()
            assert {x.id for x in listed} == {s.id, none.id, explicit.id}
            assert all(not hasattr(x, "token") for x in listed)  # the token is shown once
            got = await rc.session(s.id)
            assert got.id == s.id and got.granted == s.granted
            assert (await rc.status()).sessions == 3

            await rc.delete_session(s.id)
            with pytest.raises(NotFound):
                await rc.session(s.id)
            with pytest.raises(NotFound):
                await rc.delete_session(s.id)
            assert {x.id for x in await rc.sessions()} == {none.id, explicit.id}

            with pytest.raises(InvalidRequest) as bad:  # explicit with an unknown name: nothing created
                await rc.create_session(grant_policy="explicit", names=["up__a", "nope"])
            assert bad.value.status == 422
            with pytest.raises(Conflict) as conflict:  # pin to a revision that is not live
                await rc.create_session(revision=rev + 1000)
            assert conflict.value.code == "revision_unavailable"
            assert len(await rc.sessions()) == 2


async def test_session_refresh_answers_added_names(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        pubs = Publications(served)
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            s = await rc.create_session()
            same = await rc.refresh_session(s.id)
            assert same.added == [] and same.revision == pubs.revision

            old = pubs.revision
            async with mcp_client(served, headers={"Authorization": f"Bearer {s.token}"}) as mcp:
                await mcp.call_tool("up__set_tools", {"names": ["a", "b", "c"]})
            await pubs.wait_for(lambda g: "up__c" in g.tools)
            assert pubs.revision > old
            assert "up__c" not in (await rc.session(s.id)).names  # I9: reconciliation never adds names

            out = await rc.refresh_session(s.id)
            assert out.added == ["up__c"] and out.revision == pubs.revision
            assert "up__c" in (await rc.session(s.id)).names

            none = await rc.create_session(grant_policy="none")
            everything = await rc.refresh_session(none.id)
            assert set(everything.added) == BASE_TOOLS | {"up__c"}
            with pytest.raises(NotFound):
                await rc.refresh_session("s0-nope")


async def test_grants_all_or_nothing_and_bounded(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        rev = served.gateway.rec.runtime.current_revision
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            s = await rc.create_session(grant_policy="none")

            with pytest.raises(InvalidRequest) as bad:
                await rc.grant(s.id, ["up__a", "up__b", "nope"])
            assert bad.value.status == 422 and bad.value.code == "invalid_grant" and "nope" in bad.value.message
            assert (await rc.session(s.id)).granted == 0  # all or nothing

            out = await rc.grant(s.id, ["up__a"])
            assert out.added == ["up__a"] and out.revision == rev
            again = await rc.grant(s.id, ["up__a"])
            assert again.added == []  # nothing new
            # Bounds: names per grant 1,024 — N passes, N+1 is refused (and grants nothing).
            assert (await rc.grant(s.id, ["up__b"] * 1024)).added == ["up__b"]
            with pytest.raises(InvalidRequest) as too_many:
                await rc.grant(s.id, ["up__block"] * 1025)
            assert too_many.value.status == 422
            with pytest.raises(InvalidRequest):
                await rc.grant(s.id, [])
            assert sorted((await rc.session(s.id)).names) == ["up__a", "up__b"]
            with pytest.raises(NotFound):
                await rc.grant("s0-nope", ["up__a"])

        async with httpx2.AsyncClient(base_url=served.base_url, headers=_auth()) as http:
            r = await http.post(f"/v1/sessions/{s.id}/grants")  # the body is required
            assert r.status_code == 400
            assert_error_shape(r.json())


async def test_holds_create_and_delete(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        rev = served.gateway.rec.runtime.current_revision
        assert rev is not None
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            before = time.time()
            hold = await rc.hold(rev, ttl_s=60)
            assert hold.revision == rev and hold.owner == "operator::operator1" and hold.id
            assert before <= hold.created_at <= hold.expires_at <= hold.created_at + 60 + 1e-3
            assert (await rc.status()).holds == 1
            assert served.gateway.rec.runtime.get(rev).pins == 1  # the hold pins the generation
            await rc.release_hold(hold.id)
            assert (await rc.status()).holds == 0
            assert served.gateway.rec.runtime.get(rev).pins == 0
            with pytest.raises(NotFound):
                await rc.release_hold(hold.id)

            with pytest.raises(NotFound) as nf:
                await rc.hold(rev + 1000)
            assert nf.value.code == "revision_unavailable"
            for ttl in (0, -1, 3600.5):
                with pytest.raises(InvalidRequest):
                    await rc.hold(rev, ttl_s=ttl)
            assert (await rc.hold(rev, ttl_s=3600)).revision == rev  # the bound itself is allowed

        async with httpx2.AsyncClient(base_url=served.base_url, headers=_auth()) as http:
            for bad in ("x", f"{rev}_0", f"+{rev}", "\uff11", "9" * 5000):  # ASCII decimal only
                r = await http.post(f"/v1/revisions/{bad}/holds")
                assert r.status_code == 400, bad
                assert_error_shape(r.json())
                assert r.json()["error"]["code"] == "invalid_parameter"
            r = await http.post(f"/v1/revisions/{rev}/holds")  # no body: the default TTL
            assert r.status_code == 201 and r.json()["expires_at"] - r.json()["created_at"] == pytest.approx(600, abs=1)


async def test_healthz_and_readyz(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    good = cfg.read_text()
    async with served_gateway(cfg) as served:
        pubs = Publications(served)
        async with (
            ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc,
            httpx2.AsyncClient(base_url=served.base_url) as http,
        ):
            assert await rc.healthz() is True
            ready = await rc.readyz()
            assert ready.ready and ready.revision == pubs.revision and ready.reason is None
            r = await http.get("/readyz")  # no token needed
            assert r.status_code == 200 and wire.ReadyOut.model_validate(r.json()).ready

            # An invalid config: the last good one keeps serving, so the gateway stays ready —
            # "ready" means "can serve" (issue 10, item 13); a typo in one replica's config must
            # not pull it out of a load balancer. Status says so: state error (I11), a typed
            # condition, and /readyz names the condition.
            cfg.write_text("sources:\n  - name: up\n    stdio: {command: python\n")
            backdate(cfg)  # outside the racy window: one change, seen once
            out = await rc.refresh()
            assert isinstance(out, wire.RefreshOut)
            r = await http.get("/readyz")
            assert r.status_code == 200
            body = wire.ReadyOut.model_validate(r.json())
            assert body.ready and body.reason is None and body.revision == pubs.revision
            assert body.conditions == ["config_invalid"]
            st = await rc.status()
            assert st.config_error and st.state == "error"
            assert [(c.type, c.reason) for c in st.conditions] == [("config_invalid", "last_good_config_serving")]
            assert (await rc.readyz()).ready is True
            async with mcp_client(served) as mcp:  # and it serves
                assert not (await mcp.call_tool("up__a", {"x": "1"})).is_error
            r = await http.get("/healthz")  # the process is still up
            assert r.status_code == 200 and r.json() == {"status": "ok"}

            cfg.write_text(good)
            backdate(cfg)
            await rc.refresh()
            r = await http.get("/readyz")
            assert r.status_code == 200 and r.json()["ready"] is True and "conditions" not in r.json()
            assert (await rc.status()).conditions == []


async def test_config_edit_adds_a_source(tmp_path: Path) -> None:
    """Editing the config file is picked up by the next refresh (stat sweep before answering)."""
    cfg = write_config(tmp_path)
    async with served_gateway(cfg) as served:
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            old = (await rc.status()).revision
            write_config(tmp_path, sources=[upstream_source("up", "a", "b"), upstream_source("two", "x")])
            out = await rc.refresh()
            assert isinstance(out, wire.RefreshOut)
            assert out.changed and out.revision is not None and old is not None and out.revision > old
            assert {s.name for s in await rc.sources()} == {"up", "two"}
            assert (await rc.source("two")).state == "ready"
            cat = await rc.catalog()
            assert "two__x" in {e.name for e in cat.entries}
            gens = await rc.generations()
            assert gens.current == out.revision
            # The old generation had no pins: it closed at once (I5).
            assert [g.revision for g in gens.generations] == [out.revision]
            assert served.gateway.rec.runtime.current is not None
            assert served.gateway.rec.runtime.current.state is LiveState.CURRENT


async def test_sync_client_covers_the_api(tmp_path: Path) -> None:
    """The blocking facade, used from a worker thread while the server runs on this loop."""
    async with served_gateway(write_config(tmp_path)) as served:
        rev = served.gateway.rec.runtime.current_revision

        def script() -> None:
            with SyncReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
                assert rc.healthz() is True and rc.readyz().ready
                assert rc.status().revision == rev
                out = rc.refresh()
                assert isinstance(out, wire.RefreshOut) and out.revision == rev
                assert isinstance(rc.refresh(wait=False), wire.RefreshAccepted)
                assert rc.generations().current == rev
                assert rc.catalog(rev).revision == rev
                assert [s.name for s in rc.sources()] == ["up"] and rc.source("up").name == "up"
                s = rc.create_session(grant_policy="none")
                assert rc.grant(s.id, ["up__a"]).added == ["up__a"]
                assert rc.session(s.id).names == ["up__a"]
                assert "up__b" in rc.refresh_session(s.id).added
                assert [x.id for x in rc.sessions()] == [s.id]
                rc.delete_session(s.id)
                assert rc.sessions() == []
                hold = rc.hold(rev or 0, ttl_s=30)
                assert rc.status().holds == 1
                rc.release_hold(hold.id)
                assert rc.status().holds == 0
                try:
                    rc.source("nope")
                except NotFound as exc:
                    assert exc.code == "unknown_source"
                else:
                    raise AssertionError("unknown source answered")

        with anyio.fail_after(WAIT * 2):
            await anyio.to_thread.run_sync(script)


async def test_unknown_paths_and_methods_answer_json_errors(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        async with httpx2.AsyncClient(base_url=served.base_url, headers=_auth()) as http:
            r = await http.get("/v1/nope")
            assert r.status_code == 404 and r.json()["error"]["code"] == "no_such_endpoint"
            assert_error_shape(r.json())
            r = await http.get("/v1/refresh")  # POST only
            assert r.status_code == 405 and r.headers["allow"] == "POST"
            assert_error_shape(r.json())
            r = await http.put("/v1/sessions/x1")
            assert r.status_code == 405 and set(r.headers["allow"].split(", ")) == {"DELETE", "GET", "HEAD"}
            # A trailing or doubled slash is not redirected onto the collection.
            # A newline in the path (%0A: Starlette's path convertor stops at it) is no exception:
            # the OpenAPI fuzz once got a plain-text 404 for GET /v1/sources/%2F%0A0.
            for method, path in (
                ("DELETE", "/v1/sessions/"),
                ("DELETE", "/v1/sessions/%2F"),
                ("POST", "/v1/holds/"),
                ("GET", "/v1/sources/%2F%0A0"),
                ("GET", "/v1/%0A"),
            ):
                r = await http.request(method, path)
                assert r.status_code in (404, 405) and "location" not in r.headers, (method, path, r)
                assert_error_shape(r.json())
            assert (await http.get("/v1/sessions")).status_code == 200

            # Messages that quote the request are bounded (I12).
            r = await http.post("/v1/refresh", json={"k" * 100_000: 1})
            assert r.status_code == 422 and len(r.json()["error"]["message"]) <= 512
            r = await http.post("/v1/refresh", json={"sources": ["s" * 50_000]})
            assert r.status_code == 404 and len(r.json()["error"]["message"]) <= 512


async def test_sdk_quotes_path_segments_and_types_unreachable(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            s = await rc.create_session(grant_policy="none")
            # "?" and "#" in an id stay in the path segment: the session lookup answers, not
            # another endpoint (GET /v1/sessions would list every session).
            for odd in (f"{s.id}?x=1", f"{s.id}#frag"):
                with pytest.raises(NotFound) as nf:
                    await rc.session(odd)
                assert nf.value.code == "not_found", odd
            with pytest.raises(NotFound):  # decoded server-side to another path: no endpoint
                await rc.session("../sessions")
            with pytest.raises(NotFound):
                await rc.delete_session(f"{s.id}?")
            assert [x.id for x in await rc.sessions()] == [s.id]  # nothing was deleted
    # The server is gone: probes and calls raise the typed error (no raw transport exceptions).
    async with ReconcilerClient(served.base_url, OPERATOR_TOKEN, retries=0) as rc:
        with pytest.raises(Unreachable):
            await rc.healthz()
        with pytest.raises(Unreachable):
            await rc.readyz()
        with pytest.raises(Unreachable) as exc:
            await rc.status()
        assert exc.value.status == 0 and exc.value.retryable
