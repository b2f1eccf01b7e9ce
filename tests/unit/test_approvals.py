"""The approval registry (``reconciler/approvals.py``, ADR 0034): bounds at N and N+1, expiry,
first answer wins, standing approvals, withdrawal, and the definition check of I22 over a real
runtime (fake connections)."""

from __future__ import annotations

import anyio
import pytest

from mcp_reconciler.reconciler.approvals import (
    RECENT_MAX,
    ApprovalConfig,
    ApprovalPolicy,
    ApprovalRegistry,
    Parked,
    arguments_digest,
    definition_kept,
)
from mcp_reconciler.reconciler.errors import (
    ApprovalDeniedError,
    ApprovalExpiredError,
    ApprovalLimitError,
    ApprovalStateError,
    ApprovalWithdrawnError,
    RevisionUnavailableError,
)
from mcp_reconciler.reconciler.model import EntryKind
from mcp_reconciler.reconciler.runtime import LiveGeneration, Runtime
from tests.support.fakes import FakeConnection, catalog, state

pytestmark = pytest.mark.anyio


def park(
    registry: ApprovalRegistry, live: LiveGeneration, owner: str = "owner::a", args: dict[str, int] | None = None
) -> Parked:
    entry = live.generation.lookup(EntryKind.TOOL, "s__x")
    assert entry is not None
    return registry.park(
        principal=f"session::{owner}",
        session="s1",
        session_owner=owner,
        tool="s__x",
        args_digest=arguments_digest(args),
        live=live,
        entry=entry,
    )


def test_policy_matches_names_and_globs_and_a_sessions_own_globs() -> None:
    policy = ApprovalConfig.model_validate(["deploy_*", "rm"]).policy()
    assert policy.requires("deploy_prod") and policy.requires("rm")
    assert not policy.requires("rmdir") and not policy.requires("Deploy_x")
    assert policy.requires("rmdir", ("rm*",))
    assert not ApprovalPolicy().requires("anything")


def test_arguments_digest_is_canonical() -> None:
    assert arguments_digest({"a": 1, "b": [1, 2]}) == arguments_digest({"b": [1, 2], "a": 1})
    assert arguments_digest(None) == arguments_digest({})
    assert arguments_digest({"a": 1}) != arguments_digest({"a": 2})


async def test_parked_calls_are_bounded_at_n_and_n_plus_1_per_owner_and_in_total() -> None:
    async with Runtime() as rt:
        rt.publish(catalog(state("s", ["x"], FakeConnection())))
        live = rt.current
        assert live is not None
        registry = ApprovalRegistry(ApprovalPolicy(parked_max=3, parked_per_principal=2))
        park(registry, live, "owner::a")
        park(registry, live, "owner::a")  # N per owner
        with pytest.raises(ApprovalLimitError, match="parked_per_principal"):
            park(registry, live, "owner::a")  # N+1 per owner
        park(registry, live, "owner::b")  # N in total
        with pytest.raises(ApprovalLimitError, match="parked_max"):
            park(registry, live, "owner::c")  # N+1 in total
        assert registry.parked == 3 and live.pins == 3  # each parked call pins its generation


async def test_expiry_first_answer_and_pins() -> None:
    async with Runtime() as rt:
        rt.publish(catalog(state("s", ["x"], FakeConnection())))
        live = rt.current
        assert live is not None
        registry = ApprovalRegistry(ApprovalPolicy(timeout_s=0.05))
        parked = park(registry, live)
        with anyio.fail_after(5), pytest.raises(ApprovalExpiredError):
            await registry.wait(parked)
        gone = registry.get(parked.request.id)
        assert registry.parked == 0 and gone is not None and gone.state == "expired"
        with pytest.raises(ApprovalStateError):
            registry.decide(parked.request.id, approve=True, by="op")
        parked.pin.release()
        assert live.pins == 0

        registry.set_policy(ApprovalPolicy())
        denied = park(registry, live)
        registry.decide(denied.request.id, approve=False, by="op")
        with pytest.raises(ApprovalStateError):
            registry.decide(denied.request.id, approve=True, by="op")
        with pytest.raises(ApprovalDeniedError):
            await registry.wait(denied)


async def test_a_standing_approval_covers_n_calls_of_the_same_definition_only() -> None:
    async with Runtime() as rt:
        rt.publish(catalog(state("s", ["x"], FakeConnection())))
        live = rt.current
        assert live is not None
        entry = live.generation.lookup(EntryKind.TOOL, "s__x")
        assert entry is not None
        registry = ApprovalRegistry()
        parked = park(registry, live, args={"k": 1})
        registry.decide(parked.request.id, approve=True, by="op", uses=3)
        assert (await registry.wait(parked)).state == "approved"
        digest = arguments_digest({"k": 1})
        principal = "session::owner::a"
        assert not registry.covered(principal, "s__x", arguments_digest({"k": 2}), entry)
        assert not registry.covered("session::other", "s__x", digest, entry)
        assert registry.covered(principal, "s__x", digest, entry)
        assert registry.covered(principal, "s__x", digest, entry)
        assert not registry.covered(principal, "s__x", digest, entry)  # 3 in all, the first included


async def test_withdraw_all_answers_parked_calls_and_refuses_new_ones() -> None:
    async with Runtime() as rt:
        rt.publish(catalog(state("s", ["x"], FakeConnection())))
        live = rt.current
        assert live is not None
        registry = ApprovalRegistry()
        parked = [park(registry, live) for _ in range(2)]
        outcomes: list[BaseException] = []

        async def waiter(p: Parked) -> None:
            try:
                await registry.wait(p)
            except ApprovalWithdrawnError as exc:
                outcomes.append(exc)

        async with anyio.create_task_group() as tg:
            for p in parked:
                tg.start_soon(waiter, p)
            await anyio.wait_all_tasks_blocked()
            assert registry.withdraw_all("the gateway is shutting down") == 2
        assert len(outcomes) == 2 and all("shutting down" in str(e) for e in outcomes)
        with pytest.raises(ApprovalWithdrawnError):
            park(registry, live)


async def test_decided_requests_are_remembered_up_to_the_bound() -> None:
    async with Runtime() as rt:
        rt.publish(catalog(state("s", ["x"], FakeConnection())))
        live = rt.current
        assert live is not None
        registry = ApprovalRegistry(ApprovalPolicy(parked_max=RECENT_MAX + 10, parked_per_principal=RECENT_MAX + 10))
        ids = []
        for _ in range(RECENT_MAX + 1):
            p = park(registry, live)
            ids.append(p.request.id)
            registry.decide(p.request.id, approve=False, by="op")
            p.pin.release()
        assert registry.get(ids[0]) is None and registry.get(ids[-1]) is not None
        assert len(registry.list()) == RECENT_MAX


async def test_I22_definition_kept_only_while_the_connection_serves_the_approved_definition() -> None:
    async with Runtime() as rt:
        conn = FakeConnection()
        rt.publish(catalog(state("s", ["x", "y"], conn)))
        v1 = rt.current
        assert v1 is not None
        entry = v1.generation.lookup(EntryKind.TOOL, "s__x")
        assert entry is not None
        pin = v1.pin()  # what a parked call holds
        assert definition_kept(v1, entry, v1)

        # Another tool changes on the same connection: x is still served as approved.
        rt.publish(catalog(state("s", ["x", "y", "z"], conn)))
        assert definition_kept(v1, entry, rt.current)

        # The same connection announces a new definition of x (a rug pull): not kept.
        rt.publish(catalog(state("s", ["x", "y"], conn, version="v2")))
        assert not definition_kept(v1, entry, rt.current)
        # ...nor when the tool is gone from it.
        rt.publish(catalog(state("s", ["y"], conn)))
        assert not definition_kept(v1, entry, rt.current)

        # A new connection (a respawned source) leaves v1's own connection, and x, as approved.
        rt.publish(catalog(state("s", ["x"], FakeConnection(), version="v3")))
        assert definition_kept(v1, entry, rt.current)

        pin.release()  # the pinned generation closes: it can no longer be kept
        assert v1.is_closed and not definition_kept(v1, entry, rt.current)
        with pytest.raises(RevisionUnavailableError):
            v1.pin()


async def test_every_request_and_answer_is_one_audit_record_naming_who_decided() -> None:
    """The registry writes ``approval.requested`` when a call parks and one record per answer
    (approved, denied, withdrawn), with the tool, revision, definition and argument digests and
    who decided — the one place every channel (HTTP, CLI, console, elicitation, shutdown) passes."""
    import io
    import json

    from mcp_reconciler.reconciler import audit

    out = io.StringIO()
    async with Runtime() as rt:
        rt.publish(catalog(state("s", ["x"], FakeConnection())))
        live = rt.current
        assert live is not None
        registry = ApprovalRegistry(ApprovalPolicy(parked_max=4, parked_per_principal=4))
        with audit.installed(audit.AuditLog(audit.StreamSink(out))) as log:
            a, b, c = (park(registry, live, "owner::a", {"n": i}) for i in range(3))
            registry.decide(a.request.id, approve=True, by="operator::op")
            registry.decide(b.request.id, approve=False, by="owner::a")
            registry.withdraw_all("the gateway is stopping")
            assert log.drained(10.0)
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    kinds = [r["kind"] for r in records]
    assert kinds[:3] == ["approval.requested"] * 3
    assert sorted(kinds[3:]) == ["approval.approved", "approval.denied", "approval.withdrawn"]
    by_id = {r["target"]: r for r in records[3:]}
    assert by_id[a.request.id]["detail"] == "operator::op" and by_id[b.request.id]["detail"] == "owner::a"
    assert by_id[c.request.id]["outcome"] == "withdrawn"
    asked = {p.request.id: p.request for p in (a, b, c)}
    for r in records:
        assert r["name"] == "s__x" and r["revision"] == live.revision and r["session"] == "s1"
        assert r["digest"] == a.entry.digest
        assert r["args_sha256"] == asked[r["target"]].arguments_digest
