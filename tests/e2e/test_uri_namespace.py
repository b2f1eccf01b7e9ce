"""Resource URI namespacing end to end (issue 11, item 7): two sources serve the same URIs; a
``uri_prefix`` on one of them resolves the collision everywhere a URI crosses the gateway —
resource and template lists, reads (listed and templated), resource links and embedded resources
in tool and prompt results, subscriptions and their updates — both protocol eras. Without the
prefix the collision is a diagnostic whose advice names ``uri_prefix``."""

from __future__ import annotations

from pathlib import Path

import anyio
import mcp_types as types
import pytest

from mcp_reconciler.api.server import serve_http
from tests.e2e.conftest import WAIT, write_config
from tests.e2e.support_resources import Updates, resource_source, session_client, subscribed, until_upstream

pytestmark = pytest.mark.anyio


def two_sources(tmp_path: Path, uri_prefix: str | None) -> Path:
    return write_config(
        tmp_path,
        sources=[resource_source("one"), resource_source("two", "--legacy-only", uri_prefix=uri_prefix)],
    )


def text(contents: types.TextResourceContents | types.BlobResourceContents) -> str:
    assert isinstance(contents, types.TextResourceContents)
    return contents.text


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_uri_prefix_keeps_two_sources_apart(mode: str, tmp_path: Path) -> None:
    async with serve_http(two_sources(tmp_path, "two+"), port=0) as served:
        live = served.gateway.engine.current
        assert live is not None
        assert not [d for d in live.generation.diagnostics if d.code == "name_collision"]
        updates = Updates()
        async with session_client(served, mode, updates) as client:
            listed = {str(r.uri) for r in (await client.list_resources()).resources}
            assert listed == {"note://a", "note://b", "two+note://a", "two+note://b"}
            templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
            assert templates == {"note://{id}", "two+note://{id}"}

            # Reads: the unprefixed URI is the first source's, the prefixed one the second's, and
            # the contents come back under the URI the client asked for.
            for uri, label in (("note://a", "one"), ("two+note://a", "two"), ("two+note://zz", "two")):
                read = await client.read_resource(uri)
                upstream = uri.removeprefix("two+")
                assert [(str(c.uri), text(c)) for c in read.contents] == [(uri, f"{label}:{upstream}")]

            # Results: links and embedded resources carry exposed URIs; text is left alone.
            result = await client.call_tool("two__link", {"uri": "note://a"})
            link, embedded, plain = result.content
            assert isinstance(link, types.ResourceLink) and str(link.uri) == "two+note://a"
            assert isinstance(embedded, types.EmbeddedResource) and str(embedded.resource.uri) == "two+note://a"
            assert isinstance(plain, types.TextContent) and plain.text == "note://a"
            result = await client.call_tool("one__link", {"uri": "note://a"})
            assert str(result.content[0].uri) == "note://a"  # type: ignore[union-attr]
            prompt = await client.get_prompt("two__embed", {"uri": "note://b"})
            content = prompt.messages[0].content
            assert isinstance(content, types.EmbeddedResource) and str(content.resource.uri) == "two+note://b"

            # Subscriptions: each URI is its own source's; updates come back exposed.
            async with subscribed(client, ["two+note://a", "note://a"]) as took:
                assert took == ["two+note://a", "note://a"]
                await until_upstream(client, {"note://a": 1}, source="two")
                await until_upstream(client, {"note://a": 1}, source="one")
                with anyio.fail_after(WAIT):
                    await client.call_tool("two__touch", {"uri": "note://a"})
                    await updates.wait_for("two+note://a")
                    await client.call_tool("one__touch", {"uri": "note://a"})
                    await updates.wait_for("note://a")
                assert updates.uris == ["two+note://a", "note://a"]


async def test_a_uri_collision_is_a_diagnostic_whose_advice_works(tmp_path: Path) -> None:
    async with serve_http(two_sources(tmp_path, None), port=0) as served:
        live = served.gateway.engine.current
        assert live is not None
        collisions = [d for d in live.generation.diagnostics if d.code == "name_collision"]
        assert {d.name for d in collisions} == {"note://a", "note://b", "note://{id}"}
        assert all(d.source == "two" and "uri_prefix: 'two+'" in d.message for d in collisions), collisions
        assert not any("set a prefix" in d.message for d in collisions)  # a name prefix would not help
