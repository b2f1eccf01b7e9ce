"""Packages depend one way (issue 26, docs/DESIGN.md): the engine (``reconciler/``, which holds
the upstream peers too) imports nothing of the front door (``api/``) or the Python SDK
(``sdk/``); the SDK imports nothing of ``api/`` (the control API's wire models it shares with the
gateway live in ``sdk/wire.py``). Every import counts: module level, inside a function, under
``TYPE_CHECKING``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "mcp_reconciler"

#: What each package may not import (by installed name).
FORBIDDEN = {
    "reconciler": (f"{PACKAGE}.api", f"{PACKAGE}.sdk"),
    "sdk": (f"{PACKAGE}.api",),
}


def imported(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """Every module ``source`` imports (``from m import n`` gives ``m`` and ``m.n``), with its line."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def violations(package: str, source: str, filename: str = "<source>") -> list[str]:
    """The imports of ``source`` (a module of ``package``) that go against the direction."""
    banned = FORBIDDEN.get(package, ())
    return sorted(
        {
            f"{line}: {name}"
            for line, name in imported(source, filename)
            for b in banned
            if name == b or name.startswith(b + ".")
        }
    )


def test_each_package_imports_only_downward() -> None:
    found: dict[str, list[str]] = {}
    for package in FORBIDDEN:
        files = sorted((ROOT / package).rglob("*.py"))
        assert len(files) > 3, package  # the walk found the package
        for path in files:
            bad = violations(package, path.read_text(), str(path))
            if bad:
                found[str(path.relative_to(ROOT))] = bad
    assert found == {}


def test_the_check_catches_an_upward_import() -> None:
    """The detector itself (so the test above can fail): each form of import is seen."""
    assert violations("sdk", "from mcp_reconciler.api import wire")
    assert violations("sdk", "def f():\n    from mcp_reconciler.api.sdk_compat import mcp_http_client")
    assert violations("sdk", "import mcp_reconciler.api.wire")
    assert violations("sdk", "if TYPE_CHECKING:\n    from mcp_reconciler.api.frontdoor import FrontDoor")
    assert violations("reconciler", "from mcp_reconciler.sdk import wire")
    assert violations("reconciler", "from mcp_reconciler import api")
    assert not violations("sdk", "from mcp_reconciler.reconciler.backoff import exponential_delay")
    assert not violations("api", "from mcp_reconciler.sdk import wire")
    assert not violations("sdk", "from mcp_reconciler.apis import x")  # a prefix of a name is not the package
