"""The version is written once (``pyproject.toml``) and read from the installed metadata
everywhere else; the console script resolves to the CLI by its installed name."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

from mcp_reconciler.api import cli, openapi
from mcp_reconciler.api.version import DISTRIBUTION, __version__

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("reconciler", "api", "sdk", "examples")


def test_version_is_the_metadata_version_which_is_pyprojects() -> None:
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert __version__ == importlib.metadata.version(DISTRIBUTION) == declared


def test_no_module_writes_the_version_itself() -> None:
    """The one place is pyproject.toml: a literal copy in code would drift on the next bump."""
    literal = re.compile(rf"""["']{re.escape(__version__)}["']""")
    offenders = [
        str(path.relative_to(REPO_ROOT))
        for package in PACKAGES
        for path in (REPO_ROOT / package).rglob("*.py")
        if literal.search(path.read_text())
    ]
    assert offenders == []


def test_everything_that_states_a_version_states_the_metadata_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"mcp-reconciler {__version__}\n"
    assert openapi.document()["info"]["version"] == __version__


def test_console_script_is_the_cli_by_its_installed_name() -> None:
    (script,) = importlib.metadata.entry_points(group="console_scripts", name="mcp-reconciler")
    assert script.value == "mcp_reconciler.api.cli:main"
    assert script.load() is cli.main
