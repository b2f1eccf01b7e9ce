"""The bundled demo travels with the package and serves everything it lists.

``bundled_demo()`` finds the demo through ``importlib.resources`` (in the editable install, the
clone's ``examples/``); a forced copy is complete and removed afterwards. Served by the gateway
(streamable HTTP, both protocol eras), the demo exercises every kind end to end: each listed
tool is called (``clock__tick`` with its progress relayed), each listed resource and the
template's expansion are read, each listed prompt is got. A note added to the watched data dir
respawns the notes server, and the new note is readable in a new session (its grants come from
the new revision, I9)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from mcp_reconciler.api.bundled_demo import bundled_demo, describe
from mcp_reconciler.api.check_config import run as check_config
from mcp_reconciler.api.version import __version__
from mcp_reconciler.sdk import ReconcilerClient
from tests.api.conftest import OPERATOR_TOKEN, served_gateway
from tests.support.calls import revision_of

pytestmark = pytest.mark.anyio

REPO_ROOT = Path(__file__).resolve().parents[2]
WAIT = 30.0
TOOLS = {"clock__now", "clock__tick", "notes__count_notes", "notes__get_note"}


def test_bundled_demo_is_the_repositorys_examples_in_an_editable_install() -> None:
    with bundled_demo() as demo:
        assert demo.config == REPO_ROOT / "examples" / "demo" / "gateway.yaml"
        assert demo.data_dir == REPO_ROOT / "examples" / "demo" / "data"
        assert not demo.copied
        assert str(demo.data_dir) in describe(demo)


def test_a_copy_of_the_demo_is_complete_valid_and_removed() -> None:
    with bundled_demo(copy=True) as demo:
        root = demo.config.parent.parent
        assert demo.copied and not root.is_relative_to(REPO_ROOT)
        copied = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
        expected = {
            p.relative_to(REPO_ROOT / "examples").as_posix()
            for part in ("demo", "upstreams")
            for p in (REPO_ROOT / "examples" / part).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }
        assert copied == expected
        assert os.access(demo.data_dir, os.W_OK)
        assert check_config(str(demo.config)) == 0
        assert "temporary copy" in describe(demo)
    assert not root.exists()


async def _every_kind(client: Client) -> dict[str, Any]:
    """Use everything the demo lists; returns what was seen."""
    seen: dict[str, Any] = {}
    tools = (await client.list_tools()).tools
    assert {t.name for t in tools} == TOOLS
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, total, message))

    for tool in tools:
        args: dict[str, Any] = {"name": "first"} if tool.name == "notes__get_note" else {}
        if tool.name == "clock__tick":
            args = {"steps": 3, "interval_s": 0}
        result = await client.call_tool(tool.name, args, progress_callback=on_progress)
        assert not result.is_error, (tool.name, result)
        seen[tool.name] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert seen["clock__tick"] == {"ticks": 3}
    assert progress == [(1, 3, "tick 1 of 3"), (2, 3, "tick 2 of 3"), (3, 3, "tick 3 of 3")]

    resources = (await client.list_resources()).resources
    assert {str(r.uri) for r in resources} == {"note://first", "note://second"}
    for resource in resources:
        (content,) = (await client.read_resource(resource.uri)).contents
        seen[str(resource.uri)] = json.loads(content.text)  # type: ignore[union-attr]
    (template,) = (await client.list_resource_templates()).resource_templates
    assert template.uri_template == "note://{name}"
    (expanded,) = (await client.read_resource(template.uri_template.format(name="second"))).contents
    assert json.loads(expanded.text) == seen["note://second"]  # type: ignore[union-attr]

    prompts = (await client.list_prompts()).prompts
    assert [p.name for p in prompts] == ["ask_the_time"]  # the clock's what_time, renamed in the demo config
    for prompt in prompts:
        got = await client.get_prompt(prompt.name)
        assert revision_of(got) >= 1
        (message,) = got.messages
        assert "clock server says" in message.content.text  # type: ignore[union-attr]
    return seen


async def test_the_demo_serves_every_kind_it_lists_in_both_eras() -> None:
    with bundled_demo(copy=True) as demo:  # a copy: this test writes into the watched data dir
        async with served_gateway(demo.config) as served:
            for mode in ("legacy", "auto"):  # 2025-11-25 sessions, 2026-07-28 sessionless
                with anyio.fail_after(WAIT):
                    async with Client(served.url, mode=mode) as client:  # type: ignore[arg-type]
                        assert client.server_info is not None and client.server_info.version == __version__
                        seen = await _every_kind(client)
            assert seen["notes__count_notes"]["notes"] == 2
            assert seen["note://first"] == {"title": "first note", "body": "hello"}
            assert seen["notes__get_note"] == seen["note://first"]
            first_pid = seen["notes__count_notes"]["pid"]
            # The demo's named view: the notes source alone.
            with anyio.fail_after(WAIT):
                async with Client(served.url + "/notes-only", mode="auto") as client:  # type: ignore[arg-type]
                    assert {t.name for t in (await client.list_tools()).tools} == {
                        "notes__count_notes",
                        "notes__get_note",
                    }
                    assert (await client.list_prompts()).prompts == []

            # A new note in the watched data dir respawns the notes server into a new revision,
            # and a session that starts after it is granted the new note and can read it.
            (demo.data_dir / "third.yml").write_text("title: third\nbody: added\n")
            with anyio.fail_after(WAIT):
                async with ReconcilerClient(served.base_url, OPERATOR_TOKEN) as rc:
                    while True:
                        await rc.refresh(timeout_s=WAIT)
                        async with Client(served.url, mode="legacy") as client:
                            uris = {str(r.uri) for r in (await client.list_resources()).resources}
                            if "note://third" not in uris:
                                continue  # the write landed after that cycle's stat sweep
                            (content,) = (await client.read_resource("note://third")).contents
                            count = await client.call_tool("notes__count_notes", {})
                            break
            assert json.loads(content.text) == {"title": "third", "body": "added"}  # type: ignore[union-attr]
            count_body = json.loads(count.content[0].text)  # type: ignore[union-attr]
            assert count_body["notes"] == 3 and count_body["pid"] != first_pid


async def test_stdio_without_a_config_serves_the_bundled_demo_from_any_directory(tmp_path: Path) -> None:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_reconciler.api.cli", "stdio"], cwd=str(tmp_path)
    )
    with anyio.fail_after(WAIT):
        async with Client(server) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
