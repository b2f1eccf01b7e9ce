"""Curation in the engine (issue 27, ADR 0026): allow/deny, renames, the prefix separator, named
views, and what a curation-only change publishes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcp_reconciler.reconciler.authority import Authority, GrantPolicy, principal_id
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.catalog import make_entry, merge
from mcp_reconciler.reconciler.curation import Curation, NameFilter, SourceCuration, ViewSpec, glob_problem
from mcp_reconciler.reconciler.desired import DesiredState, StaticDesiredState
from mcp_reconciler.reconciler.errors import GrantError, UnavailableNameError, UnknownNameError
from mcp_reconciler.reconciler.generation import Generation, content_digest
from mcp_reconciler.reconciler.metadata import PROVENANCE_META
from mcp_reconciler.reconciler.model import EntryKind, SourceSpec, SourceState
from mcp_reconciler.reconciler.reconcile import Reconciler
from tests.support.fakes import FakeReader, spec

T, P, R = EntryKind.TOOL, EntryKind.PROMPT, EntryKind.RESOURCE


def source(
    name: str, tools: list[str], *, prompts: tuple[str, ...] = (), resources: tuple[str, ...] = (), **kw: Any
) -> SourceState:
    sp = SourceSpec(name=name, transport={"kind": "fake"}, **kw)
    entries = [make_entry(sp, T, t, {"name": t, "inputSchema": {"type": "object"}}) for t in tools]
    entries += [make_entry(sp, P, p, {"name": p}) for p in prompts]
    entries += [make_entry(sp, R, u, {"uri": u, "name": u}) for u in resources]
    return SourceState(source=name, spec_digest=sp.digest, entries=tuple(entries), built_at=0.0)


def build(states: list[SourceState], curation: Curation | None = None, revision: int = 1) -> Generation:
    cat = merge(states, bounds=Bounds(), built_at=0.0, curation=curation or Curation())
    return Generation(revision=revision, catalog=cat, published_at=0.0)


def codes(gen: Generation) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for d in gen.diagnostics:
        out.setdefault(d.code, []).append(d.message)
    return out


def test_prefix_is_joined_by_the_gateways_separator_unless_verbatim() -> None:
    assert set(build([source("time", ["get_time"])]).tools) == {"time__get_time"}
    assert set(build([source("time", ["get_time"], prefix="tz")]).tools) == {"tz__get_time"}
    assert set(build([source("time", ["get_time"], prefix="tz-", prefix_verbatim=True)]).tools) == {"tz-get_time"}
    assert set(build([source("time", ["get_time"], prefix="")]).tools) == {"get_time"}
    # Verbatim is part of the spec (a different served name): and absent, old digests hold.
    assert SourceSpec(name="a", prefix="x").digest != SourceSpec(name="a", prefix="x", prefix_verbatim=True).digest


def test_allow_and_deny_are_evaluated_on_the_upstreams_own_names() -> None:
    cur = Curation(
        sources={
            "fs": SourceCuration(filters={T: NameFilter(allow=("read_*", "list_directory"), deny=("read_media*",))}),
            "ev": SourceCuration(filters={T: NameFilter(deny=("*long*", "echo")), R: NameFilter(deny=("test://b",))}),
        }
    )
    gen = build(
        [
            source("fs", ["read_file", "read_media_file", "list_directory", "write_file"]),
            source("ev", ["echo", "add", "longRunningOperation"], resources=("test://a", "test://b")),
        ],
        cur,
    )
    assert set(gen.tools) == {"fs__read_file", "fs__list_directory", "ev__add"}
    assert set(gen.routes[R]) == {"test://a"}
    assert not codes(gen)  # every pattern matched something, nothing left empty


def test_a_deny_matching_nothing_and_an_allow_leaving_nothing_are_diagnostics() -> None:
    cur = Curation(
        sources={
            "a": SourceCuration(filters={T: NameFilter(deny=("nope*",)), P: NameFilter(allow=("zzz",))}),
        }
    )
    gen = build([source("a", ["x"], prompts=("p",))], cur)
    found = codes(gen)
    assert set(gen.tools) == {"a__x"} and not gen.routes[P]
    assert "curation_deny_unmatched" in found and "'nope*'" in found["curation_deny_unmatched"][0]
    assert "curation_allow_empty" in found and "of 1 listed" in found["curation_allow_empty"][0]


def test_a_rename_serves_the_new_name_and_provenance_names_the_original() -> None:
    cur = Curation(sources={"time": SourceCuration(renames={"get_current_time": "now", "tz_prompt": "tz"})})
    plain = build([source("time", ["get_current_time", "convert_time"], prompts=("tz_prompt",))])
    gen = build([source("time", ["get_current_time", "convert_time"], prompts=("tz_prompt",))], cur)
    assert set(gen.tools) == {"now", "time__convert_time"}
    assert set(gen.routes[P]) == {"tz"}
    entry = gen.tools["now"]
    assert entry.upstream_name == "get_current_time"  # what calls are forwarded under
    assert entry.digest == plain.tools["time__get_current_time"].digest  # drift (I10) unchanged
    meta = json.loads(entry.raw)["_meta"][PROVENANCE_META]
    assert meta["upstream_name"] == "get_current_time" and meta["source"] == "time"
    assert "upstream_name" not in json.loads(gen.tools["time__convert_time"].raw)["_meta"][PROVENANCE_META]


def test_I13_rename_collisions_name_both_sources_and_bad_renames_keep_the_default_name() -> None:
    cur = Curation(
        sources={
            "a": SourceCuration(renames={"x": "shared", "y": "bad name!", "gone": "ghost"}),
            "b": SourceCuration(renames={"z": "shared"}),
        }
    )
    gen = build([source("a", ["x", "y"]), source("b", ["z"])], cur)
    found = codes(gen)
    assert gen.tools["shared"].source == "a" and "a__y" in gen.tools and "b__z" not in gen.tools
    collision = found["name_collision"][0]
    assert "'b'" in collision and "'a'" in collision and "rename one of them" in collision
    assert "curation_invalid_rename" in found and "curation_rename_unused" in found


def test_views_project_the_one_catalog() -> None:
    cur = Curation(
        sources={"a": SourceCuration(renames={"x": "ax"})},
        views=(
            ViewSpec("only-b", sources=("b",)),
            ViewSpec("mixed", filters={T: NameFilter(deny=("b__secret",))}, renames={"ax": "first"}),
        ),
    )
    gen = build([source("a", ["x", "y"]), source("b", ["z", "secret"])], cur)
    assert set(gen.tools) == {"ax", "a__y", "b__z", "b__secret"}  # the catalog: one for everyone
    assert set(gen.routes_for("only-b")[T]) == {"b__z", "b__secret"}
    mixed = gen.routes_for("mixed")[T]
    assert set(mixed) == {"first", "a__y", "b__z"}
    assert mixed["first"].upstream_name == "x" and mixed["first"].exposed_name == "first"
    assert gen.routes_for("no-such-view")[T] == {}  # a removed view: its sessions see nothing
    assert gen.routes_for(None) is gen.routes


def test_the_curation_digest_is_part_of_the_catalog_and_absent_when_nothing_is_curated() -> None:
    states = [source("a", ["x", "y"])]
    plain = merge(states, bounds=Bounds(), built_at=0.0)
    assert merge(states, bounds=Bounds(), built_at=0.0, curation=Curation()).digest == plain.digest
    one = Curation(sources={"a": SourceCuration(filters={T: NameFilter(deny=("y",))})})
    same = Curation(sources={"a": SourceCuration(filters={T: NameFilter(deny=("y",))})})
    other = Curation(views=(ViewSpec("v"),))
    digests = {merge(states, bounds=Bounds(), built_at=0.0, curation=c).digest for c in (one, same)}
    assert len(digests) == 1 and plain.digest not in digests
    assert merge(states, bounds=Bounds(), built_at=0.0, curation=other).digest not in digests | {plain.digest}
    # Replicas number content: a curation edit is new content there too (ADR 0020).
    cat = merge(states, bounds=Bounds(), built_at=0.0, curation=one)
    assert content_digest(cat) != content_digest(plain)


@pytest.mark.parametrize(
    ("pattern", "ok"),
    [("read_*", True), ("[ab]x", True), ("[!a]*", True), ("[]]x", True), ("x[", False), ("a b", False), ("", False)],
)
def test_glob_problems(pattern: str, ok: bool) -> None:
    assert (glob_problem(pattern) is None) is ok


def test_I9_denied_names_never_reach_a_session_whatever_it_was_granted() -> None:
    auth = Authority(Bounds())
    gen1 = build([source("a", ["x", "y"])])
    s = auth.create(principal_id("owner", "o"), gen1, policy=GrantPolicy.CURRENT)
    gen2 = build(
        [source("a", ["x", "y"])], Curation(sources={"a": SourceCuration(filters={T: NameFilter(deny=("y",))})}), 2
    )
    assert [e.exposed_name for e in auth.view(s, gen2).entries[T]] == ["a__x"]
    with pytest.raises(UnavailableNameError):  # granted before the deny: gone, never served
        auth.resolve(s, gen2, T, "a__y")
    fresh = auth.create(principal_id("owner", "o"), gen2, policy=GrantPolicy.CURRENT)
    with pytest.raises(UnknownNameError):
        auth.resolve(fresh, gen2, T, "a__y")


def test_I9_a_view_session_is_granted_resolves_and_follows_only_inside_its_view() -> None:
    cur = Curation(views=(ViewSpec("v", sources=("a",), renames={"a__x": "x"}),))
    auth = Authority(Bounds())
    gen1 = build([source("a", ["x"]), source("b", ["z"])], cur)
    current = auth.create(principal_id("owner", "o"), gen1, policy=GrantPolicy.CURRENT, view="v")
    follow = auth.create(principal_id("owner", "o"), gen1, policy=GrantPolicy.FOLLOW, view="v")
    assert set(current.grants) == {"tool:x"} and set(follow.grants) == {"tool:x"}
    assert auth.resolve(current, gen1, T, "x").entry.upstream_name == "x"
    for name in ("b__z", "a__x"):  # another source's name, and the catalog's name of a renamed entry
        with pytest.raises(UnknownNameError):
            auth.resolve(current, gen1, T, name)
    with pytest.raises(GrantError):
        auth.grant(current, ["b__z"], gen1)  # not in the view: not grantable
    gen2 = build([source("a", ["x", "w"]), source("b", ["z", "q"])], cur, 2)
    auth.follow(gen2, gen1)
    assert set(follow.grants) == {"tool:x", "tool:a__w"}  # gained in the view only
    assert [e.exposed_name for e in auth.view(follow, gen2).entries[T]] == ["a__w", "x"]


@pytest.mark.anyio
async def test_I3_a_curation_only_change_publishes_a_new_revision_and_nothing_else() -> None:
    reader = FakeReader({"a": ["x", "y"]})
    desired = StaticDesiredState([spec("a")])
    async with Reconciler(desired, reader, bounds=Bounds(cooldown_s=0.0)) as rec:
        first = await rec.refresh(timeout_s=10)
        before = rec.runtime.current.generation  # type: ignore[union-attr]
        reader.reads.clear()
        cur = Curation(sources={"a": SourceCuration(filters={T: NameFilter(deny=("y",))})})
        desired.set(DesiredState(specs=(spec("a"),), curation=cur))
        out = await rec.refresh(["config"], timeout_s=10)
        after = rec.runtime.current.generation  # type: ignore[union-attr]
        assert out.status == "published" and out.revision == (first.revision or 0) + 1
        assert reader.reads == []  # nothing re-read, reconnected or respawned
        assert after.source_state("a") is before.source_state("a")  # the same listing, curated
        assert set(after.tools) == {"a__x"}
        again = await rec.refresh(["config"], timeout_s=10)
        assert again.status == "unchanged" and again.revision == out.revision  # a no-op edit: nothing
