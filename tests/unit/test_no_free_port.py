"""No test or benchmark picks a port for a server to bind later (issue 25).

A helper that binds port 0, reads the port and closes the socket hands out a port anyone can
take before the server binds it: a clean-clone ``make test`` on a busy machine once failed on
``address already in use`` that way. Servers bind port 0 themselves and report the port they
got (``--port-file``, the gateway's banner), or are handed a socket already bound
(``tests/support/ports.py``). This test reads the source of ``tests/`` and ``bench/`` and fails
on either shape of the old helper."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PICKER_NAMES = {"free_port", "_free_port", "pick_port", "unused_port", "get_free_port", "find_free_port"}


def sources() -> list[Path]:
    return sorted(p for d in ("tests", "bench") for p in (REPO_ROOT / d).rglob("*.py"))


def _returns_port_of_closed_socket(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``with socket...: ...; return ...getsockname()...``: the port outlives its socket."""
    for node in ast.walk(fn):
        if not isinstance(node, ast.With | ast.AsyncWith):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Return) and inner.value is not None:
                calls = [c for c in ast.walk(inner.value) if isinstance(c, ast.Call)]
                if any(isinstance(c.func, ast.Attribute) and c.func.attr == "getsockname" for c in calls):
                    return True
    return False


def pickers(source: str) -> list[str]:
    """The pick-then-bind helpers ``source`` defines or calls, as ``name:line``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name in PICKER_NAMES or _returns_port_of_closed_socket(node):
                found.append(f"def {node.name}:{node.lineno}")
        elif isinstance(node, ast.Name | ast.alias):
            name = node.id if isinstance(node, ast.Name) else node.name
            if name in PICKER_NAMES:
                found.append(f"{name}:{getattr(node, 'lineno', 0)}")
    return found


def test_no_test_or_benchmark_picks_a_port_for_a_child_to_bind_later() -> None:
    offenders = {
        str(path.relative_to(REPO_ROOT)): hits
        for path in sources()
        if path.name != Path(__file__).name and (hits := pickers(path.read_text()))
    }
    assert not offenders, f"pick-then-bind port helpers (bind port 0 in the server instead): {offenders}"


@pytest.mark.parametrize(
    "source",
    [
        "import socket\ndef free_port():\n    return 1\n",
        "from tests.integration.conftest import free_port\n",
        "import socket\ndef closed() -> int:\n"
        "    with socket.socket() as s:\n        s.bind(('127.0.0.1', 0))\n        return s.getsockname()[1]\n",
    ],
)
def test_the_check_sees_each_shape_of_the_old_helper(source: str) -> None:
    assert pickers(source)


def test_the_check_lets_a_held_socket_through() -> None:
    held = (
        "import contextlib, socket\n@contextlib.contextmanager\ndef refusing_port():\n"
        "    with socket.socket() as s:\n        s.bind(('127.0.0.1', 0))\n        yield s.getsockname()[1]\n"
    )
    assert not pickers(held)
    assert not pickers((REPO_ROOT / "tests" / "support" / "ports.py").read_text())
