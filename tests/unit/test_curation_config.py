"""The curation keys in the config (issue 27, ADR 0026): what they load as, and what
``check-config`` says about them, with ``file:line``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mcp_reconciler.reconciler.config import check_config, load_config
from mcp_reconciler.reconciler.config_source import ConfigDesiredState
from mcp_reconciler.reconciler.model import EntryKind


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def problems(path: Path) -> list[str]:
    return [str(p) for p in check_config(path, environ={})]


GOOD = """
sources:
  - name: time
    stdio: {command: python, args: [time.py]}
    prefix: tz
    tools: {deny: ["convert_*"]}
    overrides:
      get_current_time: {rename: now, description: "The time now."}
  - name: fs
    stdio: {command: python, args: [fs.py]}
    tools: {allow: ["read_*", list_directory], deny: [read_media_file]}
    resources: {deny: ["file:///secret/*"]}
views:
  - name: reader
    sources: [fs]
  - name: clock
    sources: [time, fs]
    tools: {deny: ["fs__*"]}
    rename: {now: clock}
sessions:
  - name: agent
    token: agent-token-0123456789
    grant_policy: follow
    view: reader
"""


def test_curation_loads_into_the_engines_values(tmp_path: Path) -> None:
    loaded = load_config(write(tmp_path / "g.yaml", GOOD), environ={})
    cur = loaded.curation
    time, fs = cur.for_source("time"), cur.for_source("fs")
    assert time is not None and fs is not None
    assert time.renames["get_current_time"] == "now"
    assert time.filter(EntryKind.TOOL).deny == ("convert_*",)
    assert fs.filter(EntryKind.TOOL).admits("read_file") and not fs.filter(EntryKind.TOOL).admits("read_media_file")
    assert not fs.filter(EntryKind.RESOURCE).admits("file:///secret/key")
    assert [v.name for v in cur.views] == ["reader", "clock"]
    assert cur.view("clock") is not None and cur.view("clock").renames["now"] == "clock"  # type: ignore[union-attr]
    assert loaded.sessions[0].view == "reader"
    # The description override is metadata (spec digest); the rename alone is curation.
    spec = loaded.specs[0]
    assert spec.prefix == "tz" and spec.effective_prefix == "tz__"
    assert set(spec.policy.overrides) == {"get_current_time"}
    assert cur.digest


def test_curation_is_not_part_of_the_source_spec(tmp_path: Path) -> None:
    """A curation edit re-reads nothing: the specs (what a connection is) keep their digests."""
    one = load_config(write(tmp_path / "a.yaml", GOOD), environ={})
    two = load_config(write(tmp_path / "b.yaml", GOOD.replace('deny: ["convert_*"]', 'deny: ["x*"]')), environ={})
    assert [s.digest for s in one.specs] == [s.digest for s in two.specs]
    assert one.curation.digest != two.curation.digest


def test_check_config_reports_bad_globs_unknown_sources_and_rename_collisions(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "g.yaml",
        """
        sources:
          - name: time
            stdio: {command: x}
            overrides:
              a: {rename: same}
          - name: fs
            stdio: {command: y}
            overrides:
              b: {rename: same}
          - name: bad
            stdio: {command: z}
            tools: {deny: ["get_[time"]}
            overrides: {c: {rename: "no spaces"}}
        views:
          - name: v1
            sources: [tme]
            rename: {same: one, time__x: one}
          - name: v1
        sessions:
          - name: s
            token: agent-token-0123456789
            grant_policy: current
            view: nope
        """,
    )
    found = problems(cfg)
    assert (
        f"{cfg}:12: sources[2].tools.deny: unclosed '[' in the pattern (write [[] for a literal '['): 'get_[time'"
        in found
    )
    assert any(p.startswith(f"{cfg}:13: sources[2].overrides.c.rename: a served name is 1..128") for p in found)
    assert (
        f"{cfg}:9: sources[1].overrides.b.rename: rename collision: 'same' is also the rename of 'a' in source 'time' "
        "(give one of them another name)"
    ) in found
    assert f"{cfg}:16: views[0].sources[0]: no source named 'tme' (did you mean 'time'?)" in found
    assert any(p.startswith(f"{cfg}:17: views[0].rename.time__x: rename collision in view 'v1'") for p in found)
    assert any(p.startswith(f"{cfg}:18: views[1].name: duplicate view name 'v1'") for p in found)
    assert any(p.startswith(f"{cfg}:23: sessions[0].view: no view named 'nope'") for p in found)


def test_the_misspelt_key_from_the_issue_gets_a_useful_answer(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "g.yaml",
        """
        sources:
          - name: ev
            stdio: {command: x}
            tools: {include: [echo]}
        """,
    )
    assert problems(cfg) == [f"{cfg}:4: sources[0].tools.include: unknown key (allowed keys: allow, deny)"]


@pytest.mark.anyio
async def test_I11_an_invalid_curation_edit_keeps_the_last_good_curation_with_a_file_line_error(tmp_path: Path) -> None:
    cfg = write(tmp_path / "g.yaml", GOOD)
    src = ConfigDesiredState(cfg, environ={})
    good = await src.load()
    assert good.curation.digest and good.config_error is None
    cfg.write_text(textwrap.dedent(GOOD).lstrip("\n").replace('deny: ["convert_*"]', 'deny: ["convert_["]'))
    broken = await src.load()
    assert broken.curation is good.curation  # the last good curation keeps serving
    assert broken.config_error is not None and broken.config_error.startswith(
        f"{cfg}:5: sources[0].tools.deny: unclosed"
    )
