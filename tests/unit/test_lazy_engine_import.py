"""The engine package imports its public names on first use (``reconciler/__init__.py``), so the
operator CLI and the SDK — whose one engine import is the standard-library-only
``reconciler.backoff`` — start without the engine or ``mcp_types`` (each CLI command is a
process start; CI runs hundreds)."""

from __future__ import annotations

import subprocess
import sys

import mcp_reconciler.reconciler as engine

HEAVY = ("mcp_types", "mcp_reconciler.reconciler.reconcile", "mcp_reconciler.reconciler.generation")


def test_every_public_engine_name_resolves_to_its_module() -> None:
    assert sorted(engine.__all__) == sorted(engine._LAZY)
    for name in engine.__all__:
        value = getattr(engine, name)
        assert value.__name__ == name and value.__module__ == engine._LAZY[name], name


def test_unknown_names_still_raise_attribute_error() -> None:
    try:
        engine.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError:
        pass
    else:
        raise AssertionError("an unknown name resolved")


def test_the_operator_cli_and_the_sdk_start_without_the_engine() -> None:
    probe = (
        "import sys, mcp_reconciler.api.cli, mcp_reconciler.api.operator_cli, mcp_reconciler.sdk; "
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout
