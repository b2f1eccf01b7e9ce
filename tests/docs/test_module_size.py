"""No module in ``api/`` grows past :data:`MAX_LINES` lines without a reason written at its top.

Small modules with one concept each are the house style (issue 9). A module may be longer when
that reads better, but then its module docstring says why, in a sentence containing
"lines because" ("This module is over 400 lines because …"), so the next reader need not guess."""

from __future__ import annotations

import ast

from tests.support.readme import REPO_ROOT

MAX_LINES = 400
MARKER = "lines because"


def oversized_without_reason(root: str = "api") -> list[str]:
    out = []
    for path in sorted((REPO_ROOT / root).rglob("*.py")):
        text = path.read_text()
        if text.count("\n") <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if MARKER not in " ".join(doc.split()):
            out.append(f"{path.relative_to(REPO_ROOT).as_posix()} ({text.count(chr(10))} lines)")
    return out


def test_api_modules_over_the_bound_say_why() -> None:
    missing = oversized_without_reason()
    assert not missing, (
        f"these api/ modules are over {MAX_LINES} lines and their module docstring does not say why "
        f"(a sentence with {MARKER!r}); split them by concept or write the reason: {missing}"
    )
