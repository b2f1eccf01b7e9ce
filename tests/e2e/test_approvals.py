"""Approvals bound to a revision, end to end over HTTP (issue 30, ADR 0034, I22).

A real gateway on 127.0.0.1 with the test upstream over stdio; downstream callers are the SDK's
``mcp.Client`` with session tokens their owners created over ``/v1``; approvers answer through
the SDK's ``ReconcilerClient`` (``/v1/approvals``) or, for elicitation, the calling client itself.
A parked call is observed through the engine's approval registry (a listener sets an event), never
by sleeping."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
import pytest
from mcp import Client, MCPError

from mcp_reconciler.api.server import Served
from mcp_reconciler.reconciler.approvals import ApprovalRequest, arguments_digest
from mcp_reconciler.reconciler.model import EntryKind
from mcp_reconciler.sdk import NotFound, ReconcilerClient
from mcp_reconciler.sdk.errors import ReconcilerAPIError
from tests.api.conftest import ALICE, BOB, OPERATOR_TOKEN, WAIT, mcp_client, served_gateway, upstream_source
from tests.api.conftest import write_config as api_config
from tests.support.calls import revision_of
from tests.support.observe import Publications
from tests.support.waits import no_pins

pytestmark = pytest.mark.anyio

DENIED, EXPIRED, CHANGED, PARKED_FULL, WITHDRAWN = -32040, -32041, -32042, -32043, -32044


def config(tmp: Path, **approvals: Any) -> Path:
    """One upstream ``up`` (tools a, b); ``up__a`` needs an approval unless ``approvals`` says otherwise."""
    settings = {"required": ["up__a"], **approvals}
    cfg = api_config(tmp, sources=[upstream_source("up", "a", "b")])
    import json

    doc = json.loads(cfg.read_text())
    doc["approvals"] = settings
    cfg.write_text(json.dumps(doc))
    return cfg


class Requests:
    """Every approval request the registry reports, with a wait for the next pending one."""

    def __init__(self, served: Served) -> None:
        self.seen: list[ApprovalRequest] = []
        self._event = anyio.Event()
        served.gateway.engine.approvals.add_listener(self._on)

    def _on(self, request: ApprovalRequest) -> None:
        self.seen.append(request)
        event, self._event = self._event, anyio.Event()
        event.set()

    def pending(self) -> list[ApprovalRequest]:
        decided = {r.id for r in self.seen if r.state != "pending"}
        return [r for r in self.seen if r.state == "pending" and r.id not in decided]

    async def park(
        self, tg: anyio.abc.TaskGroup, client: Client, name: str, args: dict[str, Any]
    ) -> tuple[Outcome, ApprovalRequest]:
        """Start ``client``'s call of ``name`` in ``tg`` and return it with the request it parked on."""
        call = Outcome()
        before = {r.id for r in self.pending()}
        tg.start_soon(call.run, client, name, args)
        with anyio.fail_after(WAIT):
            while not [r for r in self.pending() if r.id not in before]:
                await self._event.wait()
        return call, next(r for r in self.pending() if r.id not in before)

    async def wait_pending(self, count: int = 1) -> list[ApprovalRequest]:
        with anyio.fail_after(WAIT):
            while len(self.pending()) < count:
                await self._event.wait()
        return self.pending()


class Outcome:
    """A call run in the background: its result or its MCPError."""

    def __init__(self) -> None:
        self.result: types.CallToolResult | None = None
        self.error: MCPError | None = None
        self.done = anyio.Event()

    async def run(self, client: Client, name: str, args: dict[str, Any]) -> None:
        try:
            self.result = await client.call_tool(name, args)
        except MCPError as exc:
            self.error = exc
        finally:
            self.done.set()

    async def wait(self) -> Outcome:
        with anyio.fail_after(WAIT):
            await self.done.wait()
        return self


@asynccontextmanager
async def session_client(
    served: Served, owner_token: str, mode: str = "auto", **client_kw: Any
) -> AsyncIterator[tuple[Client, str]]:
    """An MCP client on a session ``owner_token``'s owner created over ``/v1`` (and its id)."""
    async with ReconcilerClient(served.base_url, owner_token) as rc:
        created = await rc.create_session()
    headers = {"Authorization": f"Bearer {created.token}"}
    if client_kw:
        from mcp.client.streamable_http import streamable_http_client

        from mcp_reconciler.sdk.http_client import mcp_http_client

        async with mcp_http_client(headers=headers) as http:
            async with Client(streamable_http_client(served.url, http_client=http), mode=mode, **client_kw) as client:
                yield client, created.id
        return
    async with mcp_client(served, mode=mode, headers=headers) as client:
        yield client, created.id


async def set_description(client: Client, served: Served, **descriptions: str) -> int:
    """The upstream changes tool descriptions (a definition change) and announces it; returns the
    revision that publishes it."""
    pubs = Publications(served)
    before = pubs.revision
    await client.call_tool("up__set_tools", {"names": ["a", "b"], "descriptions": descriptions})
    return (await pubs.wait_above(before)).revision


def entry_digest(served: Served, name: str) -> str:
    live = served.gateway.engine.current
    assert live is not None
    entry = live.generation.lookup(EntryKind.TOOL, name)
    assert entry is not None
    return entry.digest


# -- I22: what is approved is what runs ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_I22_an_approved_call_runs_on_the_revision_and_definition_it_was_approved_on(
    mode: str, tmp_path: Path
) -> None:
    async with served_gateway(config(tmp_path)) as served:
        requests = Requests(served)
        async with session_client(served, ALICE, mode) as (client, sid), anyio.create_task_group() as tg:
            rev1 = served.gateway.engine.current_revision
            digest_a = entry_digest(served, "up__a")
            call, request = await requests.park(tg, client, "up__a", {"x": "1"})
            assert (request.tool, request.session, request.revision) == ("up__a", sid, rev1)
            assert request.principal == f"session::{sid}" and request.session_owner == "owner::alice"
            assert request.arguments_digest == arguments_digest({"x": "1"})
            assert request.definition_digest == digest_a
            assert request.expires_at > request.requested_at

            async with (
                ReconcilerClient(served.base_url, BOB) as bob,
                ReconcilerClient(served.base_url, ALICE) as alice,
                ReconcilerClient(served.base_url, OPERATOR_TOKEN) as op,
            ):
                # Grants are access control: another owner neither sees nor answers it.
                assert await bob.approvals() == []
                with pytest.raises(NotFound):
                    await bob.approve(request.id)
                listed = await op.approvals(pending=True)
                assert [a.id for a in listed] == [request.id]
                assert listed[0].definition_digest == digest_a and listed[0].revision == rev1

                # Another tool's definition changes: a new revision, up__a's definition untouched.
                rev2 = await set_description(client, served, b="b changed")
                assert rev2 > rev1 and entry_digest(served, "up__a") == digest_a
                decided = await alice.approve(request.id)
                assert decided.state == "approved" and decided.decided_by == "owner::alice"
                await call.wait()
                assert call.error is None and call.result is not None
                assert revision_of(call.result) == rev1  # ran on the generation it was approved on
                with pytest.raises(ReconcilerAPIError) as twice:
                    await op.deny(request.id)  # the first answer won
                assert twice.value.status == 409
        await no_pins(served)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_I22_a_definition_change_between_request_and_approval_fails_the_call(mode: str, tmp_path: Path) -> None:
    """The rug pull: the upstream changes up__a's definition and announces list_changed while
    the call waits; the approval names the old definition, so the call does not run."""
    async with served_gateway(config(tmp_path)) as served:
        requests = Requests(served)
        async with session_client(served, ALICE, mode) as (client, _sid), anyio.create_task_group() as tg:
            call, request = await requests.park(tg, client, "up__a", {"x": "1"})
            await set_description(client, served, a="now deletes everything")
            assert entry_digest(served, "up__a") != request.definition_digest
            async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as op:
                await op.approve(request.id)
            await call.wait()
            assert call.error is not None and call.error.error.code == CHANGED
            assert "definition changed since approval" in call.error.error.message
            assert call.error.error.data["code"] == "definition_changed"
            assert call.error.error.data["retryable"] is True

            # Asked again, the new request names the new definition; approved, it runs.
            again = Outcome()
            tg.start_soon(again.run, client, "up__a", {"x": "1"})
            pending = await requests.wait_pending()
            assert pending[0].definition_digest == entry_digest(served, "up__a")
            async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as op:
                await op.approve(pending[0].id)
            await again.wait()
            assert again.result is not None and not again.result.is_error
        await no_pins(served)


async def test_I22_a_generation_that_could_not_be_kept_fails_the_approved_call(tmp_path: Path) -> None:
    """The parked call pins its generation only within the drain deadline: a generation closed
    before the approval (here: force-drained) is "definition changed since approval"."""
    async with served_gateway(config(tmp_path)) as served:
        requests = Requests(served)
        async with session_client(served, ALICE) as (client, _sid), anyio.create_task_group() as tg:
            call, request = await requests.park(tg, client, "up__a", {})
            await set_description(client, served, b="b changed")
            live = served.gateway.rec.runtime.get(request.revision)
            served.gateway.rec.runtime._close_generation(live)  # what the drain deadline does
            async with ReconcilerClient(served.base_url, ALICE) as alice:
                await alice.approve(request.id)
            await call.wait()
            assert call.error is not None and call.error.error.code == CHANGED


# -- denied, expired: distinct errors ---------------------------------------------------------------


async def test_a_denied_call_fails_with_approval_denied(tmp_path: Path) -> None:
    async with served_gateway(config(tmp_path)) as served:
        requests = Requests(served)
        async with session_client(served, ALICE) as (client, _sid), anyio.create_task_group() as tg:
            call, request = await requests.park(tg, client, "up__a", {"x": "1"})
            async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as op:
                assert (await op.deny(request.id)).state == "denied"
                assert (await op.approval(request.id)).state == "denied"
            await call.wait()
            assert call.error is not None and call.error.error.code == DENIED
            assert call.error.error.data["code"] == "approval_denied"
            assert "denied" in call.error.error.message
            # Calls that need no approval are untouched.
            assert not (await client.call_tool("up__b", {})).is_error
        await no_pins(served)


async def test_an_unanswered_call_expires_with_approval_expired(tmp_path: Path) -> None:
    async with served_gateway(config(tmp_path, timeout_s=0.3)) as served:
        async with session_client(served, ALICE) as (client, _sid):
            with anyio.fail_after(WAIT):
                with pytest.raises(MCPError) as err:
                    await client.call_tool("up__a", {})
            assert err.value.error.code == EXPIRED and err.value.error.data["code"] == "approval_expired"
            assert "expired" in err.value.error.message
            assert served.gateway.engine.approvals.parked == 0
        await no_pins(served)


# -- bounds: parked calls at N and N+1, per principal and in total ---------------------------------


async def test_parked_calls_are_bounded_per_principal_and_in_total_at_n_and_n_plus_1(tmp_path: Path) -> None:
    async with served_gateway(config(tmp_path, parked_per_principal=2, parked_max=3)) as served:
        requests = Requests(served)
        registry = served.gateway.engine.approvals
        async with (
            session_client(served, ALICE) as (alice_mcp, _),
            session_client(served, BOB) as (
                bob_mcp,
                _,
            ),
            anyio.create_task_group() as tg,
        ):
            calls = [Outcome(), Outcome()]
            for i, call in enumerate(calls):  # alice: N = 2 parked
                tg.start_soon(call.run, alice_mcp, "up__a", {"i": i})
            await requests.wait_pending(2)
            with pytest.raises(MCPError) as over:  # alice's N+1: refused at once
                await alice_mcp.call_tool("up__a", {"i": 9})
            assert over.value.error.code == PARKED_FULL
            assert "parked_per_principal" in over.value.error.message
            bob_call = Outcome()
            tg.start_soon(bob_call.run, bob_mcp, "up__a", {})  # total N = 3 parked
            await requests.wait_pending(3)
            with pytest.raises(MCPError) as total:  # total N+1: refused, though bob has one slot left
                await bob_mcp.call_tool("up__a", {"j": 1})
            assert total.value.error.code == PARKED_FULL and "parked_max" in total.value.error.message
            assert registry.parked == 3
            async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as op:
                for request in requests.pending():
                    await op.deny(request.id)
            for call in (*calls, bob_call):
                assert (await call.wait()).error is not None
        await no_pins(served)


# -- standing approvals: N calls for the same principal, tool, arguments ---------------------------


async def test_an_approval_may_cover_n_identical_calls(tmp_path: Path) -> None:
    async with served_gateway(config(tmp_path)) as served:
        requests = Requests(served)
        async with session_client(served, ALICE) as (client, _sid), anyio.create_task_group() as tg:
            first, request = await requests.park(tg, client, "up__a", {"x": "1"})
            async with ReconcilerClient(served.base_url, ALICE) as alice:
                assert (await alice.approve(request.id, uses=2)).uses == 2
            assert (await first.wait()).result is not None
            # The second identical call is covered: it runs without parking.
            assert not (await client.call_tool("up__a", {"x": "1"})).is_error
            assert len(requests.seen) == 2  # requested, approved: nothing new
            # Different arguments, or a third call: parked again.
            other, again = await requests.park(tg, client, "up__a", {"x": "2"})
            assert again.arguments_digest == arguments_digest({"x": "2"})
            async with ReconcilerClient(served.base_url, ALICE) as alice:
                await alice.deny(again.id)
            assert (await other.wait()).error is not None


# -- per session, over the control API --------------------------------------------------------------


async def test_a_session_owner_can_require_approvals_for_its_session_but_not_lift_them(tmp_path: Path) -> None:
    async with served_gateway(config(tmp_path, required=[])) as served:
        requests = Requests(served)
        async with session_client(served, ALICE) as (client, sid), anyio.create_task_group() as tg:
            assert not (await client.call_tool("up__b", {})).is_error  # nothing required yet
            async with (
                ReconcilerClient(served.base_url, ALICE) as alice,
                ReconcilerClient(served.base_url, BOB) as bob,
                ReconcilerClient(served.base_url, OPERATOR_TOKEN) as op,
            ):
                assert (await alice.set_session_approval(sid, ["up__b*"])).required == ["up__b*"]
                with pytest.raises(NotFound):
                    await bob.set_session_approval(sid, [])
                with pytest.raises(ReconcilerAPIError) as lift:
                    await alice.set_session_approval(sid, [])
                assert lift.value.status == 403
                call, request = await requests.park(tg, client, "up__b", {})
                assert request.tool == "up__b"
                await alice.approve(request.id)
                assert (await call.wait()).result is not None
                assert (await op.set_session_approval(sid, [])).required == []  # the operator may lift it
            assert not (await client.call_tool("up__b", {})).is_error


# -- elicitation: the calling client answers --------------------------------------------------------


class Approver:
    """An elicitation callback that answers approval forms with ``approve`` (or declines)."""

    def __init__(self, approve: bool | None) -> None:
        self.approve = approve
        self.seen: list[types.ElicitRequestParams] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.seen.append(params)
        if self.approve is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"approve": self.approve})


@pytest.mark.parametrize("answer", [True, None])
async def test_a_client_that_supports_elicitation_is_asked_to_approve(answer: bool | None, tmp_path: Path) -> None:
    async with served_gateway(config(tmp_path)) as served:
        requests = Requests(served)
        approver = Approver(answer)
        async with session_client(served, ALICE, "legacy", elicitation_callback=approver) as (client, sid):
            with anyio.fail_after(WAIT):
                if answer:
                    result = await client.call_tool("up__a", {"x": "1"})
                    assert not result.is_error
                else:
                    with pytest.raises(MCPError) as err:
                        await client.call_tool("up__a", {"x": "1"})
                    assert err.value.error.code == DENIED
        assert len(approver.seen) == 1
        form = approver.seen[0]
        assert isinstance(form, types.ElicitRequestFormParams)
        assert "up__a" in form.message and arguments_digest({"x": "1"}) in form.message
        decided = [r for r in requests.seen if r.state != "pending"]
        assert decided[0].decided_by == f"session::{sid} (elicitation)"
        assert decided[0].state == ("approved" if answer else "denied")


# -- tasks: never a way around an approval -----------------------------------------------------------


async def test_a_tool_that_needs_an_approval_never_runs_as_a_task(tmp_path: Path) -> None:
    """Tasks run outside the forwarding operation the approval hook sits in, so a tool that
    needs an approval is refused as a task — task-augmented, or required — with a clear error,
    while the same optional-task tool called plainly parks as usual."""
    from mcp_reconciler.api.server import serve_http
    from tests.e2e.support_resources import session_client as token_client
    from tests.e2e.test_tasks import config as task_config
    from tests.e2e.test_tasks import create

    cfg = task_config(tmp_path)
    import json

    doc = json.loads(cfg.read_text())
    doc["approvals"] = ["tasks__slow", "tasks__must"]
    cfg.write_text(json.dumps(doc))
    async with serve_http(cfg, port=0) as served, token_client(served, "legacy") as client:
        registry = served.gateway.engine.approvals
        for call in (
            create(client, "tasks__slow", {"value": "v"}),  # task-augmented
            client.call_tool("tasks__must", {}),  # a tool that requires a task, called plainly
        ):
            with anyio.fail_after(WAIT), pytest.raises(MCPError) as refused:
                await call
            assert refused.value.error.data["code"] == "approval_needs_plain_call"
            assert "needs an approval" in refused.value.error.message
        assert registry.parked == 0 and served.front.tasks.table is not None
        requests = Requests(served)
        async with anyio.create_task_group() as tg:
            plain, request = await requests.park(tg, client, "tasks__slow", {"value": "v"})
            registry.decide(request.id, approve=False, by="operator::test")
            assert (await plain.wait()).error is not None and plain.error.error.code == DENIED  # type: ignore[union-attr]
