"""No private of the ``mcp`` SDK is reached (issue 26), so an SDK release can move its privates
without breaking the gateway (the ``mcp`` pin spans every 2.x release that passes, ADR 0039).

- The data plane (``api/plane``), strictly: no import of a private module or name from
  ``mcp``/``mcp_types``, no attribute access to a private name on anything but ``self``, no
  ``getattr`` with a private name.
- The whole package (``reconciler/``, ``api/``, ``sdk/``): no import of a private module or name
  from ``mcp``/``mcp_types``, and no access (``obj._x``, ``getattr(obj, "_x")``) to a private
  name the installed SDK defines and the package itself does not (a name both define cannot be
  told apart without types; the known SDK privates the gateway once reached are refused always).
  One file still reaches privates until its switch-over lands: :data:`ALLOWED`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLANE = ROOT / "api" / "plane"
SDK_ROOTS = ("mcp", "mcp_types")
PACKAGES = ("reconciler", "api", "sdk")

#: Emptied by issue 26/25 switch-over: the SDK-based HTTP plane's compat module is deleted and
#: the upstream side's SDK client privates are gone (ADR 0037). Exact: a file listed here that no
#: longer reaches a private (or is gone) fails the test until it leaves the list.
ALLOWED: set[str] = set()

#: SDK privates the gateway reached before issue 26: refused even where the package defines a
#: private of the same name.
KNOWN = {
    "_connection",
    "_server_instances",
    "_request_streams",
    "_event_store",
    "_admit_session",
    "_discard_session",
    "_session_owners",
    "_sse_stream_writers",
    "_request_handlers",
    "_notification_handlers",
    "_session_manager",
    "_negotiated_version",
    "_session_read_timeout_seconds",
    "_request_outbound",
    "_serialize",
    "_stamp",
    "_stamp_server_info",
    "_read_stream_writer",
    "_validate_request_headers",
    "_clean_up_memory_streams",
}


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


def defined_privates(sources: list[str]) -> set[str]:
    """The private names ``sources`` define: functions, classes, attributes and variables
    assigned, parameters, keyword arguments, import aliases."""
    names: set[str] = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias) and node.asname:
                names.add(node.asname)
    return {n for n in names if _private(n)}


def sdk_privates() -> set[str]:
    """The private names the installed ``mcp`` and ``mcp_types`` define."""
    import mcp
    import mcp_types

    files = [f for pkg in (mcp, mcp_types) for f in Path(pkg.__file__ or "").parent.rglob("*.py")]
    assert len(files) > 20, files  # the walk found the SDK
    return defined_privates([f.read_text() for f in files])


def package_private_uses(source: str, foreign: set[str], filename: str = "<package>") -> list[str]:
    """Every private SDK name ``source`` reaches: imports (as :func:`private_uses`), and access to
    a name in ``foreign`` (the SDK's privates, less the package's own) on anything but ``self``."""
    found = [
        u for u in private_uses(source, filename) if not u.split(": ", 1)[1].startswith((".", "getattr", "setattr"))
    ]
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Attribute) and node.attr in foreign:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr"):
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and name.value in foreign:
                found.append(f"{node.lineno}: {node.func.id}(…, {name.value!r})")
    return found


def test_the_package_uses_no_private_mcp_name() -> None:
    files = {p.relative_to(ROOT).as_posix(): p.read_text() for d in PACKAGES for p in sorted((ROOT / d).rglob("*.py"))}
    assert len(files) > 100, len(files)  # the walk found the package
    foreign = (sdk_privates() - defined_privates(list(files.values()))) | KNOWN
    offences = {name: package_private_uses(text, foreign, name) for name, text in files.items()}
    found = {name: uses for name, uses in offences.items() if uses}
    assert {name: uses for name, uses in found.items() if name not in ALLOWED} == {}
    # The allowlist is exact: a file that stopped reaching privates (or was deleted) leaves it.
    assert set(found) & ALLOWED == ALLOWED, f"remove from ALLOWED: {sorted(ALLOWED - set(found))}"


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


def test_the_package_check_catches_sdk_privates_and_not_the_packages_own() -> None:
    foreign = {"_request_outbound", "_httpx_utils"} | KNOWN
    assert package_private_uses("from mcp.shared._httpx_utils import create_mcp_http_client", foreign)
    assert package_private_uses("from mcp.server.lowlevel.server import _clamp", foreign)
    assert package_private_uses("import mcp_types._version", foreign)
    assert package_private_uses("x = ctx.session._request_outbound", foreign)
    assert package_private_uses("x = getattr(transport, '_request_streams')", foreign)
    assert package_private_uses("x = manager._session_owners", foreign)  # known, even if ours too
    assert not package_private_uses("x = gate._clock\nself._request_outbound = 1", foreign)
    assert not package_private_uses("import argparse\nx = argparse._SubParsersAction", foreign)
    # The SDK's privates are found where the SDK is installed, and ours are told apart.
    found = sdk_privates()
    assert {"_request_outbound", "_serialize"} & found
    assert "_clock" in defined_privates(["class G:\n    def __init__(self):\n        self._clock = 1"])
