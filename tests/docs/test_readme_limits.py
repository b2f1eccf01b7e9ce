"""README "Rate and concurrency limits": the config loads as written and means what the comments
say, and a gateway serving it answers the sixth ``clock__now`` call of a minute with the README's
error (retry-after figures aside: they depend on how fast the five calls ran)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from mcp import Client, MCPError

from mcp_reconciler.api.server import serve_http
from mcp_reconciler.reconciler.config import check_config, load_config
from mcp_reconciler.reconciler.rate_limits import Scope
from tests.support.readme import REPO_ROOT, block

pytestmark = pytest.mark.anyio
_SECONDS = re.compile(r"(retry after |\"retry_after_s\": |\"io.mcp-reconciler/retry-after-s\": )[0-9.]+")


def layout(tmp_path: Path) -> Path:
    shutil.copytree(REPO_ROOT / "examples" / "upstreams", tmp_path / "upstreams")
    shutil.copytree(REPO_ROOT / "examples" / "demo" / "data", tmp_path / "demo" / "data")
    cfg = tmp_path / "demo" / "gateway.yaml"
    cfg.write_text(block("limits-config").text)
    return cfg


def normalized(error: dict[str, object]) -> str:
    return _SECONDS.sub(r"\g<1>N", json.dumps(error, sort_keys=True))


async def test_limits_config_and_error_as_the_readme_says(tmp_path: Path) -> None:
    cfg = layout(tmp_path)
    assert check_config(cfg, environ={}) == []
    policy = load_config(cfg).limits
    session, per_user, clock = policy.rates
    assert (session.scope, session.rate, session.burst) == (Scope.SESSION, 2.0, 10.0)
    assert (per_user.scope, per_user.sources, per_user.burst) == (Scope.PRINCIPAL, ("notes",), 600.0)
    assert (clock.scope, clock.match, clock.rate * 60, clock.burst) == (Scope.TOTAL, ("clock__*",), 5.0, 5.0)
    gate = policy.concurrency_for("notes")
    assert gate is not None and (gate.max, gate.queue, gate.queue_timeout_s) == (4, 16, 10.0)
    assert policy.concurrency_for("clock") is None

    expected = json.loads(block("limits-error").text)
    async with serve_http(cfg, host="127.0.0.1", port=0) as served, Client(served.url) as client:
        for _ in range(5):
            assert not (await client.call_tool("clock__now", {})).is_error
        with pytest.raises(MCPError) as err:
            await client.call_tool("clock__now", {})
    got = {"code": err.value.error.code, "message": err.value.error.message, "data": err.value.error.data}
    assert normalized(got) == normalized(expected)
    assert 11.0 < err.value.error.data["retry_after_s"] <= 12.0  # type: ignore[index]
