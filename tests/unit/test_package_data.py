"""The wheel ships the bundled demo's own data files only (issue 28): a note an operator adds
while following the README (``examples/demo/data/third.yml``) must not be packaged into a
wheel built afterwards, so the demo data is listed by name, never by glob."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_data_is_listed_by_name_not_globbed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = config["tool"]["setuptools"]["package-data"]["mcp_reconciler.examples.demo.data"]
    assert listed == ["first.yml", "second.yml"]
    assert not any(ch in name for name in listed for ch in "*?["), listed
    for name in listed:
        assert (ROOT / "examples" / "demo" / "data" / name).is_file(), name
