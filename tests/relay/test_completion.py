"""``completion/complete`` through the gateway: routed by prompt name or template URI to the
owning source, through authority (an ungranted reference is unknown), on a pinned revision."""

from __future__ import annotations

from pathlib import Path

import mcp_types as types
import pytest
from mcp import MCPError

from mcp_reconciler.api.frontdoor import REVISION_META
from mcp_reconciler.reconciler.authority import GrantPolicy
from tests.relay.conftest import client, gateway, session_token, stdio_source, write_config

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_completion_is_routed_to_the_owning_source(mode: str, tmp_path: Path) -> None:
    cfg = write_config(tmp_path, [stdio_source("up"), stdio_source("other", "--no-completions")])
    async with gateway(cfg) as served, client(served, mode) as c:
        assert c.server_capabilities.completions is not None
        prompt = await c.complete(types.PromptReference(name="up__greet"), {"name": "name", "value": "b"})
        assert prompt.completion.values == ["bob"]
        assert (prompt.meta or {})[REVISION_META] == served.gateway.engine.current_revision
        template = await c.complete(types.ResourceTemplateReference(uri="note://{id}"), {"name": "id", "value": ""})
        assert template.completion.values == ["1", "2", "3"]
        # A source that does not offer completions: an empty completion, not an error.
        empty = await c.complete(types.PromptReference(name="other__greet"), {"name": "name", "value": "a"})
        assert empty.completion.values == []


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_ungranted_reference_is_unknown(mode: str, tmp_path: Path) -> None:
    async with gateway(write_config(tmp_path, [stdio_source("up")])) as served:
        token = session_token(served, policy=GrantPolicy.NONE)
        async with client(served, mode, token=token) as c:
            for ref in (types.PromptReference(name="up__greet"), types.ResourceTemplateReference(uri="note://{id}")):
                with pytest.raises(MCPError) as exc:
                    await c.complete(ref, {"name": "x", "value": ""})
                assert exc.value.code == types.INVALID_PARAMS
                assert exc.value.error.data["code"] == "unknown_name"
            with pytest.raises(MCPError) as exc:
                await c.complete(types.PromptReference(name="up__nope"), {"name": "x", "value": ""})
            assert exc.value.error.data["code"] == "unknown_name"  # same answer as a name that does not exist
