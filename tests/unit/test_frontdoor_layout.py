"""The front door's shape, checked: one concept per module, SDK privates in one place, and the
wiring direction (the front door never imports the HTTP layer)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FRONTDOOR = ROOT / "api" / "frontdoor"
#: The one place SDK privates may be named: the client side (the engine's upstream connections;
#: ADR 0030). The server side reaches none since the data plane serves /mcp (ADR 0035).
COMPAT = {ROOT / "reconciler" / "sdk_client.py"}
MAX_LINES = 400

#: SDK private attributes the gateway is known to need; only the compat modules may name them.
SDK_PRIVATES = re.compile(
    r"\._(connection|server_instances|request_streams|event_store|admit_session|discard_session|session_owners|"
    r"sse_stream_writers|request_handlers|notification_handlers|session_manager|negotiated_version|"
    r"session_read_timeout_seconds)\b"
)


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


def test_sdk_privates_are_used_only_in_the_compat_module() -> None:
    offenders = []
    for path in sources():
        if path in COMPAT:
            continue
        # The SDK is the package `mcp`; our own `mcp_reconciler.*` may share privates between its modules.
        sdk = {m for m in imports(path) if m == "mcp" or m.startswith("mcp.")}
        private_modules = {m for m in sdk if re.search(r"\._[a-z]", m)}
        attrs = SDK_PRIVATES.findall(path.read_text())
        if private_modules or attrs:
            offenders.append((str(path.relative_to(ROOT)), sorted(private_modules), attrs))
    assert offenders == []


def test_the_front_door_does_not_import_the_http_layer() -> None:
    """Wiring flows one way: the HTTP app builds on the front door and hands it a push gate."""
    for path in FRONTDOOR.glob("*.py"):
        found = imports(path)
        bad = {m for m in found if m.split(".")[0] in ("starlette", "uvicorn")}
        bad |= {m for m in found if m.startswith(("mcp_reconciler.api.http_app", "mcp_reconciler.api.server"))}
        bad |= {m for m in found if m.endswith("GatewaySessionManager")}
        assert not bad, (path.name, bad)
