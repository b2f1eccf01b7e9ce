"""Exact-name authority (I9) and definition drift (I10)."""

from __future__ import annotations

import pytest

from mcp_reconciler.reconciler.authority import Authority, DriftPolicy, GrantPolicy, Session, principal_id
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.errors import GrantError, QuarantinedNameError, UnavailableNameError, UnknownNameError
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import EntryKind, SessionSpec
from tests.support.fakes import catalog, state

T = EntryKind.TOOL


def gen(revision: int, tools: list[str], version: str = "") -> Generation:
    return Generation(revision=revision, catalog=catalog(state("a", tools, version=version)), published_at=0.0)


def test_I9_authority_matrix() -> None:
    auth = Authority()
    g1 = gen(1, ["x", "y"])
    s = auth.create("owner", g1)  # policy current: granted x, y
    assert auth.resolve(s, g1, T, "a__x").entry.upstream_name == "x"
    g2 = gen(2, ["y", "z"])  # x removed upstream, z added upstream
    with pytest.raises(UnavailableNameError, match="currently unavailable"):
        auth.resolve(s, g2, T, "a__x")
    with pytest.raises(UnknownNameError):
        auth.resolve(s, g2, T, "a__z")  # new names never appear until granted
    with pytest.raises(UnknownNameError):
        auth.resolve(s, g2, T, "nope")
    assert [e.exposed_name for e in auth.view(s, g2).entries[T]] == ["a__y"]
    g3 = gen(3, ["x", "y", "z"])  # x reappears: works again
    assert auth.resolve(s, g3, T, "a__x").entry.exposed_name == "a__x"
    auth.grant(s, ["a__z"], g3)
    assert auth.resolve(s, g3, T, "a__z").entry.exposed_name == "a__z"


def test_I9_unavailable_is_distinct_from_unknown_and_retryable() -> None:
    auth = Authority()
    s = auth.create("o", gen(1, ["x"]))
    with pytest.raises(UnavailableNameError) as exc:
        auth.resolve(s, gen(2, []), T, "a__x")
    assert exc.value.retryable and exc.value.code == "currently_unavailable"
    with pytest.raises(UnknownNameError) as unknown:
        auth.resolve(s, gen(2, []), T, "a__y")
    assert not unknown.value.retryable and unknown.value.code == "unknown_name"


def test_I9_grant_policies_none_and_explicit() -> None:
    auth = Authority()
    g = gen(1, ["x", "y"])
    none = auth.create("o", g, policy=GrantPolicy.NONE)
    assert all(not v for v in auth.view(none, g).entries.values())
    explicit = auth.create("o", g, policy=GrantPolicy.EXPLICIT, names=["a__y"])
    assert [e.exposed_name for e in auth.view(explicit, g).entries[T]] == ["a__y"]


def test_I9_grants_are_all_or_nothing_and_bounded() -> None:
    auth = Authority(Bounds(names_per_grant=3, names_per_session=4))
    g = gen(1, ["a", "b", "c", "d", "e"])
    s = auth.create("o", g, policy=GrantPolicy.NONE)
    with pytest.raises(GrantError, match="not in the current catalog: missing"):
        auth.grant(s, ["a__a", "missing"], g)
    assert dict(s.grants) == {}
    auth.grant(s, ["a__a", "a__b", "a__c"], g)  # N = bound: accepted
    with pytest.raises(GrantError, match="at most 3"):
        auth.grant(s, ["a__a", "a__b", "a__c", "a__d"], g)  # N + 1 per grant
    auth.grant(s, ["a__d"], g)  # 4 per session = bound
    with pytest.raises(GrantError, match="at most 4 names"):
        auth.grant(s, ["a__e"], g)  # N + 1 per session
    assert len(s.grants) == 4


@pytest.mark.parametrize("policy", list(DriftPolicy))
def test_I10_drifted_definition_under_each_policy(policy: DriftPolicy) -> None:
    auth = Authority(drift_policy=policy)
    s = auth.create("o", gen(1, ["x"]))
    drifted = gen(2, ["x"], version="rug pull")
    before = auth.view(s, gen(1, ["x"]))
    if policy is DriftPolicy.QUARANTINE:
        with pytest.raises(QuarantinedNameError):
            auth.resolve(s, drifted, T, "a__x")
        assert auth.view(s, drifted).entries[T] == ()
    else:
        resolved = auth.resolve(s, drifted, T, "a__x")
        assert resolved.drifted is (policy is DriftPolicy.FLAG)
        assert auth.view(s, drifted).drifted == ({"tool:a__x"} if policy is DriftPolicy.FLAG else set())
    changed = auth.view(s, drifted).changed_kinds(before)
    assert changed == {T}  # the definition a client sees changed (or vanished): it must re-list
    auth.grant(s, ["a__x"], drifted)  # re-granting accepts the new definition
    assert auth.resolve(s, drifted, T, "a__x").drifted is False


def test_I9_view_digest_changes_only_with_the_sessions_view() -> None:
    auth = Authority()
    s = auth.create("o", gen(1, ["x"]))
    v1 = auth.view(s, gen(1, ["x"]))
    v2 = auth.view(s, gen(2, ["x", "new"]))  # upstream added a name the session was not granted
    assert v2.changed_kinds(v1) == set()
    v3 = auth.view(s, gen(3, []))
    assert v3.changed_kinds(v2) == {T}


def test_session_count_is_bounded_at_n_and_n_plus_1() -> None:
    from mcp_reconciler.reconciler.errors import SessionLimitError

    auth = Authority(Bounds(sessions=3))
    g = gen(1, ["x"])
    for _ in range(3):
        auth.create("o", g)  # N sessions: accepted
    with pytest.raises(SessionLimitError):
        auth.create("o", g)  # N + 1: refused


@pytest.mark.anyio
async def test_transport_owned_sessions_do_not_use_up_api_session_slots() -> None:
    """Issue 10, item 6: 10,000 legacy connections without a token each created a session in
    the one shared table; API sessions then got 429 and 2026-era calls -32603. Sessions owned
    by a transport connection are bounded by the transport's limit, not by ``bounds.sessions``."""
    import anyio
    from mcp import Client

    from mcp_reconciler.api.frontdoor import FrontDoor
    from mcp_reconciler.reconciler.desired import StaticDesiredState
    from mcp_reconciler.reconciler.engine import open_engine
    from mcp_reconciler.reconciler.model import SourceSpec
    from tests.support.plane_memory import PlaneTransport
    from tests.support.servers import DynamicServer

    srv = DynamicServer("a", ["x"])
    bounds = Bounds(cooldown_s=0.0, sessions=3)
    specs = [SourceSpec(name="a", transport={"kind": "in-process"})]
    async with open_engine(StaticDesiredState(specs), lambda s, _e: srv.server, bounds=bounds) as engine:
        await engine.refresh(timeout_s=10)
        front = FrontDoor(engine, engine.sessions)  # in memory: the local identity
        async with anyio.create_task_group() as tg:
            await tg.start(front.run)
            with anyio.fail_after(30):
                async with (
                    Client(PlaneTransport(front), mode="legacy") as c1,
                    Client(PlaneTransport(front), mode="legacy") as c2,
                    Client(PlaneTransport(front), mode="legacy") as c3,
                    Client(PlaneTransport(front), mode="legacy") as c4,
                ):
                    for c in (c1, c2, c3, c4):  # 4 connections, 4 transport-owned sessions > bound 3
                        assert [t.name for t in (await c.list_tools()).tools] == ["a__x"]
                    owned = [b.session.id for b in front.sessions.bindings.values() if b.era == "legacy"]
                    assert len(owned) == 4
                    for i in range(3):  # the control API's 3 slots are all still free
                        engine.sessions.create(f"owner{i}", engine.current.generation)  # type: ignore[union-attr]
                    with pytest.raises(Exception, match="at most 3 sessions"):
                        engine.sessions.create("owner3", None)
                    async with Client(PlaneTransport(front), mode="auto") as modern:  # not -32603
                        assert (await modern.call_tool("a__x", {"x": "1"})).is_error is False
                # Each connection's end unbound it and removed the session made for it (the plane
                # tells the front door: ``Sessions.connection_closed``).
                assert not [b for b in front.sessions.bindings.values() if b.era == "legacy"]
                assert [sid for sid in owned if engine.sessions.get(sid) is not None] == []
            tg.cancel_scope.cancel()
# -- standing grants: follow (I9) ------------------------------------------------------------------


def gen2(revision: int, a: list[str], b: list[str], version: str = "") -> Generation:
    """Two sources, ``a`` and ``b``."""
    return Generation(
        revision=revision, catalog=catalog(state("a", a, version=version), state("b", b)), published_at=0.0
    )


def names(auth: Authority, s: Session, g: Generation) -> list[str]:
    return [e.exposed_name for e in auth.view(s, g).entries[T]]


def test_I9_follow_grants_what_the_catalog_gains_per_source_and_drift_still_applies() -> None:
    auth = Authority(drift_policy=DriftPolicy.QUARANTINE)
    changed: list[int] = []
    auth.on_changed(lambda: changed.append(1))
    g1 = gen2(1, ["x"], ["p"])
    every = auth.create("owner::o", g1, policy=GrantPolicy.FOLLOW)
    only_a = auth.create("owner::o", g1, policy=GrantPolicy.FOLLOW, sources=["a"])
    current = auth.create("owner::o", g1)
    assert names(auth, every, g1) == ["a__x", "b__p"] and names(auth, only_a, g1) == ["a__x"]

    g2 = gen2(2, ["x", "y"], ["p", "q"])  # both sources gain a tool
    auth.follow(g2, g1)
    assert names(auth, every, g2) == ["a__x", "a__y", "b__p", "b__q"]
    assert names(auth, only_a, g2) == ["a__x", "a__y"]  # scoped: b__q is not followed
    assert names(auth, current, g2) == ["a__x", "b__p"]  # I9: no other session gains anything
    with pytest.raises(UnknownNameError):
        auth.resolve(only_a, g2, T, "b__q")
    assert changed  # the front door is told to re-evaluate views

    # A definition the session has seen changes: drift policy applies (quarantine), the standing
    # grant never silently accepts the new definition.
    g3 = gen2(3, ["x", "y"], ["p", "q"], version="v2")
    auth.follow(g3, g2)
    with pytest.raises(QuarantinedNameError):
        auth.resolve(every, g3, T, "a__y")
    assert "a__y" not in names(auth, every, g3)

    # A name that leaves and comes back is still granted (and still its first-seen definition).
    g4 = gen2(4, [], ["p", "q"])
    auth.follow(g4, g3)
    g5 = gen2(5, ["x", "y"], ["p", "q"])
    auth.follow(g5, g4)
    assert names(auth, every, g5) == ["a__x", "a__y", "b__p", "b__q"]


def test_I9_follow_session_created_from_an_older_revision_catches_up() -> None:
    auth = Authority()
    g1, g2 = gen(1, ["x"]), gen(2, ["x", "y"])
    s = auth.create("owner::o", g1, policy=GrantPolicy.FOLLOW)  # e.g. pinned to revision 1 at creation
    g3 = gen(3, ["x", "y", "z"])
    auth.follow(g3, g2)  # it missed revision 2: compared with the whole of revision 3
    assert names(auth, s, g3) == ["a__x", "a__y", "a__z"]


def test_I9_follow_is_bounded_by_names_per_session() -> None:
    auth = Authority(Bounds(names_per_session=3))
    g1 = gen(1, ["x"])
    s = auth.create("owner::o", g1, policy=GrantPolicy.FOLLOW)
    g2 = gen(2, ["x", "y", "z"])  # N = 3 names: all granted
    auth.follow(g2, g1)
    assert len(s.grants) == 3
    g3 = gen(3, ["x", "y", "z", "w"])  # N + 1: left out (and logged), never an error
    auth.follow(g3, g2)
    assert len(s.grants) == 3 and "a__w" not in names(auth, s, g3)


# -- sessions declared in the config ----------------------------------------------------------------


def test_declared_sessions_are_added_updated_rotated_and_removed() -> None:
    auth = Authority()
    removed: list[str] = []
    auth.on_removed(removed.append)
    g = gen(1, ["x", "y"])
    token = "t" * 20
    ci = SessionSpec(name="ci", token=token, policy="explicit", names=("a__x", "a__later"))
    out = auth.declare([ci], g)
    assert out.added == ("ci",)
    s = auth.declared()["ci"]
    assert s.id == "cfg-ci" and s.owner == "config::ci" and auth.by_token(token) is s
    assert names(auth, s, g) == ["a__x"]  # a declared name the catalog lacks waits for it...
    g2 = gen(2, ["x", "y", "later"])
    auth.follow(g2, g)
    assert names(auth, s, g2) == ["a__later", "a__x"]  # ...and is granted when it appears

    assert not auth.declare([ci], g2).changed  # unchanged declaration: untouched
    rotated = SessionSpec(name="ci", token="u" * 20, policy="explicit", names=("a__x", "a__later"))
    out = auth.declare([rotated], g2)
    assert out.rotated == ("ci",) and not out.updated
    assert auth.by_token(token) is None and auth.by_token("u" * 20) is s  # same session, new token
    widened = SessionSpec(name="ci", token="u" * 20, policy="current")
    assert auth.declare([widened], g2).updated == ("ci",)
    assert names(auth, s, g2) == ["a__later", "a__x", "a__y"]

    assert auth.declare([], g2).removed == ("ci",)
    assert auth.by_token("u" * 20) is None and removed == ["cfg-ci"] and auth.sessions() == []
    assert "u" * 20 not in repr(rotated) and "u" * 20 not in repr(s)  # tokens stay out of reprs


def test_principal_ids_of_different_roles_never_collide() -> None:
    assert principal_id("owner", "operator1") != principal_id("operator", "operator1")
    assert principal_id("owner", "alice") == "owner::alice"
    assert principal_id("oauth", "alice", issuer="https://idp") != principal_id("owner", "alice")
