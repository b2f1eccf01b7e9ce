"""Sessions created over the control API and used at the MCP front door with their bearer
token (both protocol eras): a session sees exactly its grants (I9); a grant made over the API
appears in the session (legacy sessions are pushed ``tools/list_changed``); an invalid token is
refused at the HTTP layer (401, I16 — ``test_mcp_auth.py`` has the whole matrix)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_reconciler.sdk import ReconcilerClient
from tests.api.conftest import (
    OPERATOR_TOKEN,
    Changes,
    call_error,
    mcp_client,
    refused,
    served_gateway,
    tool_names,
    write_config,
)
from tests.support.waits import until

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_session_token_sees_exactly_its_grants(mode: str, tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            s = await rc.create_session(grant_policy="none")
            changes = Changes()
            headers = {"Authorization": f"Bearer {s.token}"}
            async with mcp_client(served, mode=mode, headers=headers, message_handler=changes) as mcp:
                assert await tool_names(mcp) == set()
                assert (await call_error(mcp, "up__a")).code == -32602  # never granted: "unknown"

                if mode == "legacy":
                    # The notifier must have bound this connection (and seen its GET stream)
                    # before the grant, or there is no view change to push.
                    await until(
                        lambda: any(b.session.id == s.id for b in served.front.bindings.values()),
                        what="the legacy session binding",
                    )
                    binding = next(b for b in served.front.bindings.values() if b.session.id == s.id)
                    await until(lambda: binding.last_view is not None, what="the binding's first view")

                out = await rc.grant(s.id, ["up__a"])
                assert out.added == ["up__a"]
                if mode == "legacy":
                    await changes.wait_tools(1)  # pushed on the session's GET stream
                assert await tool_names(mcp) == {"up__a"}
                res = await mcp.call_tool("up__a", {"x": "1"})
                assert not res.is_error
                assert (await call_error(mcp, "up__b")).code == -32602  # still not granted

                # The session is the API's session: deleting it ends the token's authority (the
                # next request is refused with 401 before the SDK sees it: test_mcp_auth.py).
                await rc.delete_session(s.id)
                assert not any(b.session.id == s.id for b in served.front.bindings.values())
                assert served.gateway.engine.sessions.by_token(s.token) is None


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_invalid_session_token_isrefused(mode: str, tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        # A wrong token, and a control-API token (which is no session token).
        for token in ("not-a-session-token", OPERATOR_TOKEN):
            exc = await refused(served, mode, {"Authorization": f"Bearer {token}"})
            assert token not in repr(exc)
        assert served.gateway.engine.sessions.sessions() == [] and not served.front.bindings


async def test_two_sessions_are_isolated(tmp_path: Path) -> None:
    async with served_gateway(write_config(tmp_path)) as served:
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            a = await rc.create_session(grant_policy="explicit", names=["up__a"])
            b = await rc.create_session(grant_policy="explicit", names=["up__b"])
            async with (
                mcp_client(served, headers={"Authorization": f"Bearer {a.token}"}) as ma,
                mcp_client(served, mode="legacy", headers={"Authorization": f"Bearer {b.token}"}) as mb,
            ):
                assert await tool_names(ma) == {"up__a"}
                assert await tool_names(mb) == {"up__b"}
                await rc.grant(b.id, ["up__a"])
                assert await tool_names(ma) == {"up__a"}
                assert await tool_names(mb) == {"up__a", "up__b"}
