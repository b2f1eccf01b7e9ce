"""``reconciler/task_support.py``: which connections run tool tasks, what a tool's taskSupport
is, and the listing filter that keeps the catalog from advertising what cannot be served."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.catalog import make_entry
from mcp_reconciler.reconciler.model import CatalogEntry, EntryKind, SourceSpec
from mcp_reconciler.reconciler.task_support import honest_listing, runs_tool_tasks, task_support

SPEC = SourceSpec(name="s")
TASKS = types.ServerCapabilities(
    tasks=types.ServerTasksCapability(
        requests=types.ServerTasksRequestsCapability(tools=types.TasksToolsCapability(call=types.TasksCallCapability()))
    )
)


def tool(name: str, support: str | None) -> CatalogEntry:
    definition: dict[str, Any] = {"name": name, "inputSchema": {"type": "object"}}
    if support is not None:
        definition["execution"] = {"taskSupport": support}
    return make_entry(SPEC, EntryKind.TOOL, name, definition)


def test_only_a_2025_connection_with_the_capability_runs_tool_tasks() -> None:
    assert runs_tool_tasks("2025-11-25", TASKS)
    assert not runs_tool_tasks("2026-07-28", TASKS)  # not in that protocol's core
    assert not runs_tool_tasks("2025-11-25", types.ServerCapabilities())
    assert not runs_tool_tasks("2025-11-25", types.ServerCapabilities(tasks=types.ServerTasksCapability()))
    assert not runs_tool_tasks(None, None)


def test_task_support_reads_the_definition() -> None:
    assert [task_support(tool("t", s)) for s in (None, "forbidden", "optional", "required")] == [
        "forbidden",
        "forbidden",
        "optional",
        "required",
    ]
    resource = make_entry(SPEC, EntryKind.RESOURCE, "note://a", {"uri": "note://a", "name": "a"})
    assert task_support(resource) == "forbidden"


def test_a_source_that_runs_tasks_keeps_every_tool_as_it_is() -> None:
    entries = (tool("a", "required"), tool("b", "optional"), tool("c", None))
    kept, diags = honest_listing(entries, SPEC, Bounds(), runs_tasks=True)
    assert kept is entries and diags == ()


def test_a_source_that_cannot_run_tasks_advertises_none() -> None:
    entries = (tool("a", "required"), tool("b", "optional"), tool("c", None))
    kept, diags = honest_listing(entries, SPEC, Bounds(), runs_tasks=False)
    assert [e.exposed_name for e in kept] == ["s__b", "s__c"]
    assert "execution" not in json.loads(kept[0].raw)  # optional: an ordinary call here
    assert kept[1] is entries[2]
    assert [(d.code, d.name) for d in diags] == [("task_unsupported", "s__a")]
    plain = (tool("c", None),)
    assert honest_listing(plain, SPEC, Bounds(), runs_tasks=False)[0] is plain  # nothing to do: no cost
