"""The front door's shape, checked: one concept per module and the wiring direction (the front
door never imports the HTTP layer). SDK privates: ``test_plane_layering.py``; package direction:
``test_layering.py``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FRONTDOOR = ROOT / "api" / "frontdoor"
MAX_LINES = 400

def sources() -> list[Path]:
    return sorted(p for d in ("api", "reconciler", "sdk") for p in (ROOT / d).rglob("*.py"))


def imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_no_front_door_module_is_over_400_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in FRONTDOOR.glob("*.py")}
    assert sizes and all(n <= MAX_LINES for n in sizes.values()), sizes


def test_the_front_door_does_not_import_the_http_layer() -> None:
    """Wiring flows one way: the HTTP app builds on the front door and hands it a push gate."""
    for path in FRONTDOOR.glob("*.py"):
        found = imports(path)
        bad = {m for m in found if m.split(".")[0] in ("starlette", "uvicorn")}
        bad |= {m for m in found if m.startswith(("mcp_reconciler.api.http_app", "mcp_reconciler.api.server"))}
        bad |= {m for m in found if m.endswith("GatewaySessionManager")}
        assert not bad, (path.name, bad)
