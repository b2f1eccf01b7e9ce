"""Rejected entries are visible through ``/v1/status`` (I11, I13), end to end.

A real upstream (``tests.support.upstream_server --bad-tools 4``, stdio) lists two good tools,
its control tools and four definitions the gateway must reject one by one. The status answer
names every rejection — source, name, code, sanitized message — and the count per source; the
good entries are served. Nothing upstream-controlled leaks: the fake credential in the long
description is not echoed, and a newline in a name is scrubbed."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest

from mcp_reconciler.sdk import ReconcilerClient
from tests.api.conftest import OPERATOR_TOKEN, served_gateway, upstream_source, write_config
from tests.integration.conftest import REPO_ROOT, SERVER_MODULE
from tests.support.upstream_server import BAD_TOOL_SECRET

pytestmark = pytest.mark.anyio


def bad_source(name: str, bad: int) -> dict[str, object]:
    return {
        "name": name,
        "stdio": {
            "command": "python",
            "args": ["-m", SERVER_MODULE, "--tools", "a,b", "--bad-tools", str(bad)],
            "cwd": str(REPO_ROOT),
        },
    }


async def test_I13_rejected_entries_are_listed_in_status(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, sources=[upstream_source("ok", "x"), bad_source("up", 4)])
    async with served_gateway(cfg) as served:
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            st = await rc.status()
            catalog = await rc.catalog()
            async with httpx2.AsyncClient(base_url=served.base_url, trust_env=False) as http:
                raw = (await http.get("/v1/status", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})).text
    assert st.state == "ready", st
    assert {"up__a", "up__b", "ok__x"} <= {e.name for e in catalog.entries}  # the good entries are served
    by_source = {s.name: s for s in st.sources}
    assert by_source["up"].diagnostics == 4 and by_source["ok"].diagnostics == 0
    assert st.diagnostics_total == 4
    rejected = [d for d in st.diagnostics if d.source == "up"]
    assert len(rejected) == 4, st.diagnostics
    assert {d.code for d in rejected} == {"invalid_entry"}
    names = {d.name for d in rejected}
    long_name = "bad_long_1_" + "n" * 200
    assert names == {"bad name 0", long_name[:157] + "...", "bad_description_2", "bad_json_schema_3"}, names
    messages = {d.name: d.message for d in rejected}
    assert "name must match" in messages["bad name 0"]
    assert "over the 128-character bound" in messages[long_name[:157] + "..."]
    assert "over the 8192-byte bound" in messages["bad_description_2"]
    assert "not a valid JSON Schema" in messages["bad_json_schema_3"]
    for d in rejected:
        assert "\n" not in d.message and "\n" not in (d.name or "")
        assert len(d.message.encode()) <= 512
    assert BAD_TOOL_SECRET not in raw and "bad-tool-s3cr3t" not in raw
    assert json.loads(raw)["diagnostics_total"] == 4


async def test_I13_status_diagnostics_are_bounded_and_the_total_is_reported(tmp_path: Path) -> None:
    """More rejections than ``Bounds.status_diagnostics`` (100): 100 listed, the total says 101."""
    cfg = write_config(tmp_path, sources=[bad_source("up", 101)])
    async with served_gateway(cfg) as served:
        async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
            st = await rc.status()
    assert st.diagnostics_total == 101
    assert len(st.diagnostics) == 100
    assert {s.name: s.diagnostics for s in st.sources} == {"up": 101}
