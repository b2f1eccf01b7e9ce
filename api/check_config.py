"""``mcp-reconciler check-config FILE``: validate without serving. Exit 0 valid, 1 invalid."""

from __future__ import annotations

import sys

from mcp_reconciler.reconciler.config import ConfigError, load_config


def run(path: str) -> int:
    """Validate the config at ``path`` and print a one-line verdict: 0 if valid (stdout), 1 if invalid
    or unreadable (every problem on stderr). Starts nothing."""
    try:
        loaded = load_config(path)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        print(f"{path}: invalid ({len(exc.problems)} problem(s))", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{path}: cannot read the config file: {exc.strerror}", file=sys.stderr)
        return 1
    names = ", ".join(s.name for s in loaded.specs) or "none"
    declared = [v.name for v in loaded.curation.views]
    views = f"; {len(declared)} view(s): {', '.join(declared)}" if declared else ""
    print(f"{path}: valid — {len(loaded.specs)} source(s): {names}{views}; {len(loaded.files)} file(s) read")
    return 0
