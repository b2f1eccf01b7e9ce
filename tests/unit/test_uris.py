"""The per-source URI namespace (``reconciler/uris.py``): exposed and upstream URIs are each
other's inverse, results are rewritten only where URIs are, the catalog decides collisions on
exposed URIs with advice that works, and the config bounds ``uri_prefix`` at N and N+1."""

from __future__ import annotations

from pathlib import Path

import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.catalog import make_entry, merge
from mcp_reconciler.reconciler.config import ConfigError, load_config
from mcp_reconciler.reconciler.model import EntryKind, SourceSpec, SourceState
from mcp_reconciler.reconciler.uris import (
    URI_PREFIX,
    prefix_of,
    rewrite_result,
    suggested_prefix,
    upstream_uri,
)

PREFIXES = st.from_regex(URI_PREFIX, fullmatch=True)
URIS = st.from_regex(r"[a-z]{1,8}://[A-Za-z0-9/._-]{0,40}", fullmatch=True)


@given(prefix=PREFIXES, uri=URIS)
def test_exposed_and_upstream_uris_are_inverse(prefix: str, uri: str) -> None:
    spec = SourceSpec(name="s", uri_prefix=prefix)
    resource = make_entry(spec, EntryKind.RESOURCE, uri, {"uri": uri, "name": "r"})
    assert resource.exposed_name == prefix + uri
    assert prefix_of(resource) == prefix
    assert upstream_uri(resource, resource.exposed_name) == uri
    template = make_entry(spec, EntryKind.RESOURCE_TEMPLATE, "note://{id}", {"uriTemplate": "note://{id}", "name": "t"})
    assert template.exposed_name == prefix + "note://{id}"
    assert upstream_uri(template, prefix + "note://" + uri[-3:]) == "note://" + uri[-3:]


def test_no_prefix_changes_nothing() -> None:
    spec = SourceSpec(name="s")
    entry = make_entry(spec, EntryKind.RESOURCE, "note://a", {"uri": "note://a", "name": "a"})
    assert (entry.exposed_name, prefix_of(entry)) == ("note://a", "")
    result = types.CallToolResult(content=[types.ResourceLink(uri="note://a", name="a")])
    assert rewrite_result(result, None) is result
    # Without a uri_prefix the spec digest is what it was before the option existed.
    assert SourceSpec(name="s").digest == SourceSpec(name="s", uri_prefix=None).digest
    assert SourceSpec(name="s").digest != SourceSpec(name="s", uri_prefix="s+").digest


def test_tool_and_prompt_names_are_not_uris() -> None:
    spec = SourceSpec(name="s", uri_prefix="s+")
    tool = make_entry(spec, EntryKind.TOOL, "t", {"name": "t", "inputSchema": {"type": "object"}})
    assert tool.exposed_name == "s__t"
    with pytest.raises(ValueError):
        prefix_of(tool)


def test_results_carry_exposed_uris_where_uris_are() -> None:
    link = types.ResourceLink(uri="note://a", name="a")
    embedded = types.EmbeddedResource(resource=types.TextResourceContents(uri="note://b", text="note://b"))
    plain = types.TextContent(text="note://c")
    out = rewrite_result(types.CallToolResult(content=[link, embedded, plain]), "x+")
    assert [getattr(b, "uri", None) or getattr(getattr(b, "resource", None), "uri", None) for b in out.content] == [
        "x+note://a",
        "x+note://b",
        None,
    ]
    assert out.content[1].resource.text == "note://b"  # type: ignore[union-attr]
    assert out.content[2].text == "note://c"  # type: ignore[union-attr]
    prompt = types.GetPromptResult(messages=[types.PromptMessage(role="user", content=embedded)])
    assert rewrite_result(prompt, "x+").messages[0].content.resource.uri == "x+note://b"  # type: ignore[union-attr]
    read = types.ReadResourceResult(contents=[types.BlobResourceContents(uri="file:///a", blob="AA==")])
    assert rewrite_result(read, "x+").contents[0].uri == "x+file:///a"
    assert link.uri == "note://a"  # the upstream's result is not mutated


@pytest.mark.parametrize(
    ("source", "prefix"), [("notes", "notes+"), ("My_Src.2", "my-src.2+"), ("9lives", "s9lives+"), ("__", "s--+")]
)
def test_suggested_prefix_is_a_valid_scheme_prefix(source: str, prefix: str) -> None:
    assert suggested_prefix(source) == prefix
    assert URI_PREFIX.fullmatch(prefix)


def test_collisions_are_decided_on_exposed_uris_with_advice_that_works() -> None:
    def state(spec: SourceSpec) -> SourceState:
        entries = (
            make_entry(spec, EntryKind.RESOURCE, "note://a", {"uri": "note://a", "name": "a"}),
            make_entry(spec, EntryKind.TOOL, "t", {"name": "t", "inputSchema": {"type": "object"}}),
        )
        return SourceState(source=spec.name, spec_digest=spec.digest, entries=entries, built_at=0.0)

    clash = merge(
        [state(SourceSpec(name="one")), state(SourceSpec(name="two", prefix="one"))], bounds=Bounds(), built_at=0
    )
    by_name = {d.name: d.message for d in clash.diagnostics if d.code == "name_collision"}
    assert "uri_prefix: 'two+'" in by_name["note://a"] and "set a prefix" not in by_name["note://a"]
    assert "set a prefix" in by_name["one__t"]

    apart = merge(
        [state(SourceSpec(name="one")), state(SourceSpec(name="two", uri_prefix="two+"))], bounds=Bounds(), built_at=0
    )
    assert not apart.diagnostics
    assert set(apart.routes[EntryKind.RESOURCE]) == {"note://a", "two+note://a"}


def _config(tmp_path: Path, uri_prefix: str) -> Path:
    cfg = tmp_path / "g.yaml"
    cfg.write_text(f"sources:\n  - name: a\n    stdio: {{command: x}}\n    uri_prefix: {uri_prefix!r}\n")
    return cfg


def test_config_uri_prefix_is_bounded_at_n_and_n_plus_1(tmp_path: Path) -> None:
    loaded = load_config(_config(tmp_path, "a" * 63 + "+"))
    assert loaded.specs[0].uri_prefix == "a" * 63 + "+"
    with pytest.raises(ConfigError) as exc:
        load_config(_config(tmp_path, "a" * 64 + "+"))
    assert "sources[0].uri_prefix: a uri_prefix is 1..64 characters" in str(exc.value)
    with pytest.raises(ConfigError):
        load_config(_config(tmp_path, "notes{+"))  # a template brace would change templates' meaning
