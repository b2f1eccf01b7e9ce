"""The discovery config keys (issue 31, ADR 0029): the top-level default (``discovery: search``
or a mapping), per view, per declared session; bad values are config errors that name the file,
line and key."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

from mcp_reconciler.reconciler.authority import Authority
from mcp_reconciler.reconciler.config import check_config, load_config
from mcp_reconciler.reconciler.discovery import DEFAULT_POLICY, DiscoveryMode

TOKEN = "a-declared-session-token-0123"


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


GOOD = f"""
sources:
  - name: up
    stdio: {{command: x}}
discovery:
  mode: search
  always_visible: [up__help]
  found_max: 5
views:
  - name: wide
    discovery: all
  - name: narrow
sessions:
  - {{name: ci, token: "{TOKEN}", grant_policy: current, discovery: all}}
  - {{name: bot, token: "{TOKEN}-2", grant_policy: current}}
"""


def test_discovery_loads_into_the_engines_policy(tmp_path: Path) -> None:
    loaded = load_config(write(tmp_path / "g.yaml", GOOD), environ={})
    policy = loaded.discovery
    assert policy.mode is DiscoveryMode.SEARCH and policy.found_max == 5
    assert policy.always_visible == frozenset({"up__help"})
    assert dict(policy.views) == {"wide": DiscoveryMode.ALL}  # "narrow" inherits the default
    specs = {s.name: s for s in loaded.sessions}
    assert specs["ci"].discovery == "all" and specs["bot"].discovery is None
    # A change of mode is a change of the declaration (re-applied on reload).
    assert replace(specs["ci"], discovery=None).grants_digest != specs["ci"].grants_digest


def test_a_declared_sessions_mode_is_applied_and_its_change_resets_the_found_set(tmp_path: Path) -> None:
    loaded = load_config(write(tmp_path / "g.yaml", GOOD), environ={})
    auth = Authority()
    auth.set_discovery(loaded.discovery)
    auth.declare(loaded.sessions, None)
    declared = auth.declared()
    assert not auth.searching(declared["ci"])  # its own "all" wins over the config's search
    assert auth.searching(declared["bot"])  # the config's default
    declared["bot"].found = ("up__x",)
    flipped = tuple(s if s.name != "bot" else replace(s, discovery="all") for s in loaded.sessions)
    auth.declare(flipped, None)
    assert not auth.searching(declared["bot"]) and declared["bot"].found == ()


def test_the_shorthand_and_the_default(tmp_path: Path) -> None:
    short = load_config(write(tmp_path / "s.yaml", "sources: []\ndiscovery: search\n"), environ={})
    assert short.discovery.mode is DiscoveryMode.SEARCH
    plain = load_config(write(tmp_path / "p.yaml", "sources: []\n"), environ={})
    assert plain.discovery == DEFAULT_POLICY


def test_bad_discovery_values_name_file_line_and_key(tmp_path: Path) -> None:
    cfg = write(
        tmp_path / "bad.yaml",
        """
        sources: []
        discovery:
          mode: sometimes
          found_max: 0
        views:
          - name: v
            discovery: maybe
        """,
    )
    problems = [str(p) for p in check_config(cfg, environ={})]
    text = "\n".join(problems)
    assert "bad.yaml:4" in text and "discovery.mode" in text, text
    assert "discovery.found_max" in text, text
    assert "views[0].discovery" in text or "views.0.discovery" in text, text
