"""The gateway's data plane (``api/plane``) reaches no private of the ``mcp`` SDK (issue 26):
no import of a private module or name from ``mcp``/``mcp_types``, no attribute access to a
private name on anything but ``self``, no ``getattr`` with a private name. The SDK is used for
types and protocol rules through public names only, so an SDK release can move its privates
without breaking the plane."""

from __future__ import annotations

import ast
from pathlib import Path

PLANE = Path(__file__).resolve().parents[2] / "api" / "plane"
SDK_ROOTS = ("mcp", "mcp_types")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(source: str, filename: str = "<plane>") -> list[str]:
    """Every private SDK name ``source`` reaches, as ``line: what``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in SDK_ROOTS:
            if any(_private(part) for part in node.module.split(".")):
                found.append(f"{node.lineno}: from {node.module}")
            found += [f"{node.lineno}: import {a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in SDK_ROOTS and any(_private(p) for p in parts):
                    found.append(f"{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr"):
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value):
                found.append(f"{node.lineno}: {node.func.id}(…, {name.value!r})")
    return found


def test_plane_uses_no_private_mcp_name() -> None:
    files = sorted(PLANE.glob("*.py"))
    assert files, PLANE
    offences = {str(f.name): private_uses(f.read_text(), str(f)) for f in files}
    assert {k: v for k, v in offences.items() if v} == {}


def test_the_check_catches_each_kind_of_private_use() -> None:
    """The detector itself: each way of reaching a private is reported (so the test can fail)."""
    assert private_uses("from mcp.server._streamable_http_modern import handle_modern_request")
    assert private_uses("from mcp.server.runner import _dump_result")
    assert private_uses("import mcp.shared._httpx_utils")
    assert private_uses("x = ctx.session._request_outbound")
    assert private_uses("x = getattr(session, '_connection')")
    assert not private_uses("from mcp.shared.inbound import classify_inbound_request\nself._front = 1")
