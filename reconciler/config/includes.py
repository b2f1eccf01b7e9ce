"""Drop-in files: the ``include`` globs, expanded relative to the main file, and the names problems
show for them."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mcp_reconciler.reconciler.freshness import strict_glob


def _display_for(match: Path, main_abs_dir: Path, main_display: str) -> str:
    try:
        relative = match.relative_to(main_abs_dir)
    except ValueError:
        return str(match)
    return os.path.join(os.path.dirname(main_display), str(relative))


def _expand_includes(patterns: Sequence[str], main_abs: Path) -> list[Path]:
    found: set[str] = set()
    for pattern in patterns:
        for match in strict_glob(pattern):
            if os.path.isfile(match):
                found.add(os.path.abspath(match))
    found.discard(str(main_abs))
    return [Path(p) for p in sorted(found)]


def _raw_includes(data: Any, main_dir: Path) -> list[str] | None:
    """Include globs from an invalid main file, when they are readable on their own, so that
    the drop-ins keep being watched while the operator fixes the file."""
    if not isinstance(data, Mapping):
        return None
    raw = data.get("include")
    if raw is None:
        return []
    if isinstance(raw, list) and all(isinstance(p, str) and p for p in raw):
        return [os.path.normpath(os.path.join(main_dir, p)) for p in raw]
    return None
