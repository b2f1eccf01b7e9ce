"""README "Layout" names every module of the shipped packages, and only modules that exist.

Every ``.py`` file under ``reconciler/``, ``api/`` and ``sdk/`` (``__init__.py`` included: a
package's exports are part of its surface) must be named in the table under ``## Layout``, so a
new module cannot land undocumented and a removed one cannot stay listed. A row names a module
by its repository path in backticks (`` `api/wire.py` ``) or, for a group, by a folder in its
first cell (`` `api/frontdoor/` ``) and the file's name anywhere in the row (`` `door.py` ``)."""

from __future__ import annotations

import re

from tests.support.readme import README, REPO_ROOT

SHIPPED = ("reconciler", "api", "sdk")
_TICKED = re.compile(r"`([^`]+)`")


def layout_rows(text: str) -> list[str]:
    """The body rows of the table in the ``## Layout`` section (header and rule left out)."""
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return rows[2:]


def named_paths(rows: list[str]) -> set[str]:
    """Every repository path the rows name: full paths, and file names under the row's folders."""
    named: set[str] = set()
    for row in rows:
        first = row.strip().strip("|").split("|", 1)[0]
        folders = [t for t in _TICKED.findall(first) if t.endswith("/")]
        for token in _TICKED.findall(row):
            if "/" in token:
                named.add(token)
            elif token.endswith(".py"):
                named.update(folder + token for folder in folders)
    return named


def shipped_modules() -> list[str]:
    return sorted(p.relative_to(REPO_ROOT).as_posix() for d in SHIPPED for p in (REPO_ROOT / d).rglob("*.py"))


def test_rows_name_full_paths_and_files_under_a_folder() -> None:
    rows = ["| `api/frontdoor/` | assembled in `door.py`: `sessions.py`, `FrontDoor` |", "| `api/wire.py` | models |"]
    assert named_paths(rows) == {
        "api/frontdoor/",
        "api/frontdoor/door.py",
        "api/frontdoor/sessions.py",
        "api/wire.py",
    }
    # A bare file name without a folder in the first cell names nothing.
    assert named_paths(["| `api/control.py` | see `wire.py` |"]) == {"api/control.py"}


def test_layout_names_every_shipped_module() -> None:
    modules = shipped_modules()
    assert len(modules) > 50, modules  # the walk found the packages
    named = named_paths(layout_rows(README.read_text()))
    missing = [m for m in modules if m not in named]
    assert not missing, (
        "README.md's Layout table does not name these modules; add a row (or name the file in its "
        f"package's row) saying what each is for: {missing}"
    )


def test_layout_names_only_modules_that_exist() -> None:
    named = named_paths(layout_rows(README.read_text()))
    stale = sorted(
        p for p in named if p.endswith(".py") and p.split("/", 1)[0] in SHIPPED and not (REPO_ROOT / p).is_file()
    )
    assert not stale, f"README.md's Layout table names modules that do not exist: {stale}"
